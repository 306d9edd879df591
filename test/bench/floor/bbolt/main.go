// Command bbolt is the durable-store floor of the benchmark: the least a
// durable ADD or DEL must do, one bbolt Update (open, put, commit with its
// two fdatasyncs, close) on the store file named by its only argument.
package main

import (
	"os"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
)

func main() {
	if len(os.Args) != 2 {
		os.Stderr.WriteString("usage: bbolt FILE\n")
		os.Exit(2)
	}
	if err := put(os.Args[1]); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
}

func put(path string) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("floor"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), strconv.AppendInt(nil, time.Now().UnixNano(), 10))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}
