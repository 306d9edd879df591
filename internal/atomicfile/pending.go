package atomicfile

import (
	"errors"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/cdi-exec/plugins/internal/dirent"
)

// Pending replaces one file in steps, for a writer that must put the new
// file in place while it holds a lock but need not make it durable
// there:
//
//   - Open, before the lock, opens the directory and, where the file
//     system makes unnamed files (O_TMPFILE), the new file, so that its
//     inode is allocated outside the lock;
//   - Place, under the lock, writes the content, gives the file a
//     temporary name and renames it into place, without an fsync;
//   - Sync, after the lock, makes the file and the directory durable.
//
// Readers find the old file or the new one, never a torn one. Until Sync
// returns, a crash may lose the new file or leave it empty or torn.
// Withdraw takes a placed file back while nobody has replaced it since.
type Pending struct {
	dir  string
	dfd  int
	perm os.FileMode
	f    *os.File // the new file: unnamed until Place, or nil until Place makes a named one
	name string   // where Place put the file; "" before
}

// Open opens dir for a replacement of one of its files with mode perm
// (whatever the umask) and, where the file system can, makes the new
// file, unnamed. A file system without O_TMPFILE is no error: Place then
// makes a named temporary file, as Write does.
func Open(dir string, perm os.FileMode) (*Pending, error) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	p := &Pending{dir: dir, dfd: dfd, perm: perm.Perm()}
	fd, err := unix.Openat(dfd, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, uint32(p.perm))
	if err != nil {
		return p, nil
	}
	if unix.Fchmod(fd, uint32(p.perm)) != nil {
		unix.Close(fd)
		return p, nil
	}
	p.f = os.NewFile(uintptr(fd), dir+"/(unnamed)")
	return p, nil
}

// Names lists the directory, read from its start.
func (p *Pending) Names() ([]string, error) {
	if _, err := unix.Seek(p.dfd, 0, io.SeekStart); err != nil {
		return nil, &os.PathError{Op: "seek", Path: p.dir, Err: err}
	}
	var names []string
	err := dirent.ListFD(p.dfd, p.dir, func(name []byte, _ uint64, _ uint8) {
		names = append(names, string(name))
	})
	return names, err
}

// Sweep removes the stale temporary files of pattern among names, a
// listing of the directory (Names), as SweepListed does.
func (p *Pending) Sweep(pattern string, names []string) {
	removeStale(p.dfd, tempsOf(pattern, names))
}

// Place writes b as the new file, gives it a temporary name of pattern
// (Options.Temp; a killed writer's litter is found by it) and renames it
// over name. It does not fsync; see Sync. It places one file only.
func (p *Pending) Place(name, pattern string, b []byte) error {
	if p.name != "" {
		return errors.New("atomicfile: a Pending places one file only")
	}
	tmp, err := p.temp(pattern, b)
	if err != nil {
		return err
	}
	if err := unix.Renameat(p.dfd, tmp, p.dfd, name); err != nil {
		_ = unix.Unlinkat(p.dfd, tmp, 0)
		return &os.PathError{Op: "rename", Path: p.dir + "/" + name, Err: err}
	}
	p.name = name
	return nil
}

// temp writes b into the new file and returns its temporary name: the
// unnamed file linked, or, where there is none or it cannot be linked, a
// file made under that name.
func (p *Pending) temp(pattern string, b []byte) (string, error) {
	if p.f != nil {
		if _, err := p.f.Write(b); err != nil {
			return "", err
		}
		if tmp, err := p.link(pattern); err == nil {
			return tmp, nil
		}
		p.f.Close()
		p.f = nil
	}
	var tmp string
	var fd int
	var err error
	for try := 0; ; try++ {
		tmp = tempName(pattern, try)
		fd, err = unix.Openat(p.dfd, tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(p.perm))
		if err != unix.EEXIST || try == maxTries-1 {
			break
		}
	}
	if err != nil {
		return "", &os.PathError{Op: "create", Path: p.dir + "/" + tmp, Err: err}
	}
	p.f = os.NewFile(uintptr(fd), p.dir+"/"+tmp)
	err = p.f.Chmod(p.perm)
	if err == nil {
		_, err = p.f.Write(b)
	}
	if err != nil {
		_ = unix.Unlinkat(p.dfd, tmp, 0)
		return "", err
	}
	return tmp, nil
}

// link gives the unnamed file a temporary name: by its descriptor
// (AT_EMPTY_PATH, which needs CAP_DAC_READ_SEARCH), else through
// /proc/self/fd, as open(2) describes for O_TMPFILE.
func (p *Pending) link(pattern string) (string, error) {
	fd := int(p.f.Fd())
	for try := 0; ; try++ {
		tmp := tempName(pattern, try)
		err := unix.Linkat(fd, "", p.dfd, tmp, unix.AT_EMPTY_PATH)
		if err != nil && err != unix.EEXIST {
			err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), p.dfd, tmp, unix.AT_SYMLINK_FOLLOW)
		}
		if err != unix.EEXIST || try == maxTries-1 {
			return tmp, err
		}
	}
}

// Sync makes the placed file durable: an fsync of the file, then of the
// directory, which holds its rename (and whatever else was renamed or
// removed in it since).
func (p *Pending) Sync() error {
	if p.name == "" || p.f == nil {
		return errors.New("atomicfile: Sync of nothing placed, or after Close")
	}
	if err := p.f.Sync(); err != nil {
		return err
	}
	if err := unix.Fsync(p.dfd); err != nil {
		return &os.PathError{Op: "fsync", Path: p.dir, Err: err}
	}
	return nil
}

// Placed reports whether the name Place used still holds the file it put
// there: no writer has replaced or removed it since.
func (p *Pending) Placed() bool {
	if p.name == "" || p.f == nil {
		return false
	}
	var own, now unix.Stat_t
	if unix.Fstat(int(p.f.Fd()), &own) != nil || unix.Fstatat(p.dfd, p.name, &now, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return false
	}
	return own.Ino == now.Ino && own.Dev == now.Dev
}

// Withdraw removes the placed file while it is still there (Placed) and
// reports whether it did; a file that another writer has put under the
// name since stays. The check and the removal are two steps: the caller
// holds the lock every writer of the name takes.
func (p *Pending) Withdraw() (bool, error) {
	if !p.Placed() {
		return false, nil
	}
	if err := unix.Unlinkat(p.dfd, p.name, 0); err != nil && err != unix.ENOENT {
		return false, &os.PathError{Op: "unlink", Path: p.dir + "/" + p.name, Err: err}
	}
	return true, nil
}

// Close closes the file and the directory; an unnamed file never placed
// goes with it.
func (p *Pending) Close() error {
	var err error
	if p.f != nil {
		err = p.f.Close()
		p.f = nil
	}
	if p.dfd >= 0 {
		if cerr := unix.Close(p.dfd); err == nil {
			err = cerr
		}
		p.dfd = -1
	}
	return err
}
