module github.com/cdi-exec/plugins

go 1.26.0

require (
	go.etcd.io/bbolt v1.5.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
