package pages

// What the external test (pages_test.go) needs of the package's inside: to
// read a meta page, to tell the live pages, and the layout's constants to
// aim damage with.

// Meta is a decoded meta page.
type Meta struct{ Root, Freelist, High uint64 }

// ParseMeta is parseMeta.
func ParseMeta(p []byte) (Meta, bool) {
	m, ok := parseMeta(p)
	return Meta{Root: m.root, Freelist: m.freelist, High: m.high}, ok
}

// Live walks the tree of the meta page at the start of file and reports
// which pages it reaches.
func Live(file []byte, meta Meta) (func(id uint64) bool, error) {
	pf := &pageFile{size: uint64(len(file)), all: file}
	m, err := pf.meta()
	if err != nil {
		return nil, err
	}
	m.root, m.freelist, m.high = meta.Root, meta.Freelist, meta.High
	w := &walker{pf: pf, m: m, seen: newBits(m.high)}
	if err := w.page(m.root, 0, keyRange{}); err != nil {
		return nil, err
	}
	return w.seen.has, nil
}

const (
	PageHeaderSize = pageHeaderSize
	ElementSize    = elementSize
	BranchFlag     = branchFlag
	LeafFlag       = leafFlag
)
