// Package atomicfile replaces a file whole: the new content is written to
// a temporary file in the same directory and renamed (or linked) into
// place, so a reader finds the old file or the new one, never a torn one.
// Temporary files that a killed writer left behind are swept once stale.
// Write does it in one call; Pending does it in steps around a caller's
// lock, the file made before it and made durable after it.
package atomicfile

import (
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/internal/dirent"
)

// StaleAge is how old a temporary file must be before a sweep removes it
// as a killed writer's litter: a write takes milliseconds.
const StaleAge = 5 * time.Minute

// Options say how Write replaces a file.
type Options struct {
	// Temp names the temporary files: a pattern with one "*", which a
	// unique part replaces. The same pattern finds them for Sweep.
	Temp string
	// Perm is the new file's mode, whatever the umask.
	Perm os.FileMode
	// NoClobber links the new file into place only if the name is free;
	// an existing file is kept and Write succeeds.
	NoClobber bool
	// NoSync skips both fsyncs, for a file rebuilt when it is lost: after
	// a crash it may be empty or torn.
	NoSync bool
	// UnlinkFirst removes the old file before the rename, so that ext4
	// (auto_da_alloc) does not flush the new one to disk on the rename;
	// for a moment no file is there, so only for a file whose reader
	// copes with none (with NoSync: a cache).
	UnlinkFirst bool
}

// Write replaces dir/name with what fill writes to the temporary file:
// create, fill, fsync, close, rename (or link), fsync the directory. It
// first sweeps the directory's stale temporary files of o.Temp. fill must
// not close the file.
func Write(dir, name string, o Options, fill func(*os.File) error) error {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	SweepAt(dfd, dir, o.Temp)
	var tmp string
	var fd int
	for try := 0; ; try++ {
		tmp = tempName(o.Temp, try)
		fd, err = unix.Openat(dfd, tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(o.Perm.Perm()))
		if err != unix.EEXIST || try == maxTries-1 {
			break
		}
	}
	if err != nil {
		return &os.PathError{Op: "create", Path: dir + "/" + tmp, Err: err}
	}
	renamed := false
	defer func() {
		if !renamed { // a failure, or NoClobber's link: the name goes
			_ = unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	f := os.NewFile(uintptr(fd), dir+"/"+tmp)
	err = f.Chmod(o.Perm.Perm())
	if err == nil {
		err = fill(f)
	}
	if err == nil && !o.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	switch {
	case o.NoClobber:
		if err := unix.Linkat(dfd, tmp, dfd, name, 0); err != nil && err != unix.EEXIST {
			return &os.PathError{Op: "link", Path: dir + "/" + name, Err: err}
		}
	default:
		if o.UnlinkFirst {
			if err := unix.Unlinkat(dfd, name, 0); err != nil && err != unix.ENOENT {
				return &os.PathError{Op: "unlink", Path: dir + "/" + name, Err: err}
			}
		}
		if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
			return &os.PathError{Op: "rename", Path: dir + "/" + name, Err: err}
		}
		renamed = true
	}
	if o.NoSync {
		return nil
	}
	if err := unix.Fsync(dfd); err != nil {
		return &os.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}

// maxTries is how many temporary names a writer tries: two writers of
// one process can meet on a name in one nanosecond, and the later takes
// the next name.
const maxTries = 10

// tempName is the try'th temporary name of pattern (Options.Temp) now:
// the "*" replaced by the process id and the time in nanoseconds, plus
// try.
func tempName(pattern string, try int) string {
	before, after, _ := strings.Cut(pattern, "*")
	return before + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano()+int64(try), 10) + after
}

// WriteBytes is Write with fill writing b.
func WriteBytes(dir, name string, o Options, b []byte) error {
	return Write(dir, name, o, func(f *os.File) error {
		_, err := f.Write(b)
		return err
	})
}

// Sweep removes the temporary files of pattern (Options.Temp) in dir that
// are stale: regular files of this user older than StaleAge. A directory
// that cannot be read is left alone.
func Sweep(dir, pattern string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	SweepAt(fd, dir, pattern)
}

// SweepAt is Sweep in the directory open as dfd, read from its start;
// dir names it in errors. dfd's offset is left at the end.
func SweepAt(dfd int, dir, pattern string) {
	before, after, _ := strings.Cut(pattern, "*")
	var stale []string
	_ = dirent.ListFD(dfd, dir, func(name []byte, _ uint64, _ uint8) {
		if temp(string(name), before, after) {
			stale = append(stale, string(name))
		}
	})
	removeStale(dfd, stale)
}

// SweepListed is Sweep over names, a listing of dir the caller has made
// anyway, so that the directory is not read twice; it opens dir only
// when a name is one of pattern's.
func SweepListed(dir, pattern string, names []string) {
	stale := tempsOf(pattern, names)
	if len(stale) == 0 {
		return
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	removeStale(fd, stale)
}

// tempsOf are the names of pattern's temporary files among names.
func tempsOf(pattern string, names []string) []string {
	before, after, _ := strings.Cut(pattern, "*")
	var out []string
	for _, name := range names {
		if temp(name, before, after) {
			out = append(out, name)
		}
	}
	return out
}

// temp reports whether name is a temporary file of the pattern cut at its
// "*": the parts around it and a unique part between them.
func temp(name, before, after string) bool {
	return len(name) > len(before)+len(after) && strings.HasPrefix(name, before) && strings.HasSuffix(name, after)
}

// removeStale removes those of the names in dfd that are stale: regular
// files of this user older than StaleAge.
func removeStale(dfd int, names []string) {
	if len(names) == 0 {
		return
	}
	cutoff := time.Now().Add(-StaleAge).Unix()
	euid := uint32(os.Geteuid())
	for _, name := range names {
		var st unix.Stat_t
		if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil &&
			st.Mode&unix.S_IFMT == unix.S_IFREG && st.Uid == euid && st.Mtim.Sec < cutoff {
			_ = unix.Unlinkat(dfd, name, 0)
		}
	}
}
