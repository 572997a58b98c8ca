// Package tf keeps the robot's transform tree as tf2 does: what arrives on
// /tf and /tf_static, per child frame its one parent and a short history of
// stamped transforms, and lookups between any two frames at a time, with
// interpolation between the stamps. The node reads the base → camera
// transform and the odometry from it, and asks it which frames already have
// a parent before publishing one (REP 105: a frame has one parent).
package tf

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lingbotmap/lingbotmap/engine/geom"
)

// Errors a lookup or an update wraps.
var (
	// ErrSecondParent: a transform names a parent for a frame that already
	// has another one.
	ErrSecondParent = errors.New("tf: frame already has another parent")
	// ErrNoPath: the frames are not connected (yet).
	ErrNoPath = errors.New("tf: no transform between the frames")
	// ErrExtrapolation: the time asked for lies outside the history by more
	// than the tolerance.
	ErrExtrapolation = errors.New("tf: lookup would extrapolate")
	// ErrBadTransform: a transform with NaN, infinity or a zero quaternion.
	ErrBadTransform = errors.New("tf: transform is not finite or has no rotation")
)

// Transform is one stamped parent → child transform: the child frame's pose
// in the parent frame.
type Transform struct {
	Parent, Child string
	Stamp         time.Time
	T             [3]float64
	Q             geom.Quat // x, y, z, w
}

type frame struct {
	parent    string
	static    bool
	authority string
	hist      []Transform // sorted by stamp; one entry for a static frame
}

// Buffer is the transform tree. It is safe for concurrent use.
type Buffer struct {
	mu     sync.Mutex
	cache  time.Duration
	frames map[string]*frame
}

// NewBuffer keeps cache of history per dynamic frame (tf2's default is 10 s).
func NewBuffer(cache time.Duration) *Buffer {
	if cache <= 0 {
		cache = 10 * time.Second
	}
	return &Buffer{cache: cache, frames: map[string]*frame{}}
}

// Name normalises a frame id the way tf2 does: no leading slash.
func Name(id string) string { return strings.TrimLeft(strings.TrimSpace(id), "/") }

// Set adds a transform. A static one replaces the frame's transform for all
// times. A transform that would give its child a second parent is refused
// with ErrSecondParent (the first parent stays), as are non-finite ones.
// authority names the sender for messages.
func (b *Buffer) Set(tr Transform, static bool, authority string) error {
	tr.Parent, tr.Child = Name(tr.Parent), Name(tr.Child)
	if tr.Parent == "" || tr.Child == "" || tr.Parent == tr.Child {
		return fmt.Errorf("%w: parent %q, child %q", ErrBadTransform, tr.Parent, tr.Child)
	}
	if _, err := geom.Compose(tr.T, tr.Q); err != nil {
		return fmt.Errorf("%w: %s → %s: %w", ErrBadTransform, tr.Parent, tr.Child, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.frames[tr.Child]
	if f != nil && f.parent != tr.Parent {
		return fmt.Errorf("%w: %s → %s from %s, but %s's parent is %s (from %s)",
			ErrSecondParent, tr.Parent, tr.Child, authority, tr.Child, f.parent, f.authority)
	}
	if b.wouldLoop(tr.Parent, tr.Child) {
		return fmt.Errorf("%w: %s → %s closes a loop in the tree", ErrSecondParent, tr.Parent, tr.Child)
	}
	if f == nil {
		f = &frame{parent: tr.Parent}
		b.frames[tr.Child] = f
	}
	f.authority = authority
	if static {
		f.static = true
		f.hist = append(f.hist[:0], tr)
		return nil
	}
	if f.static {
		return fmt.Errorf("%w: %s → %s is static; a dynamic transform for it from %s is refused",
			ErrSecondParent, tr.Parent, tr.Child, authority)
	}
	i, _ := slices.BinarySearchFunc(f.hist, tr.Stamp, func(a Transform, t time.Time) int { return a.Stamp.Compare(t) })
	if i < len(f.hist) && f.hist[i].Stamp.Equal(tr.Stamp) {
		f.hist[i] = tr
	} else {
		f.hist = slices.Insert(f.hist, i, tr)
	}
	newest := f.hist[len(f.hist)-1].Stamp
	k := 0
	for k < len(f.hist)-1 && newest.Sub(f.hist[k].Stamp) > b.cache {
		k++
	}
	f.hist = f.hist[k:]
	return nil
}

// wouldLoop says whether child is an ancestor of parent.
func (b *Buffer) wouldLoop(parent, child string) bool {
	for f, n := parent, 0; n < 1000; n++ {
		if f == child {
			return true
		}
		fr, ok := b.frames[f]
		if !ok {
			return false
		}
		f = fr.parent
	}
	return true
}

// Parent returns a frame's parent and who set it.
func (b *Buffer) Parent(child string) (parent, authority string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f, ok := b.frames[Name(child)]
	if !ok {
		return "", "", false
	}
	return f.parent, f.authority, true
}

// Lookup returns target_T_source: the source frame's pose in the target
// frame at time at, interpolating each link's history. A zero at asks for
// the newest time every link has. A link whose history does not reach at
// within tolerance gives ErrExtrapolation.
func (b *Buffer) Lookup(target, source string, at time.Time, tolerance time.Duration) (geom.Mat4, error) {
	target, source = Name(target), Name(source)
	b.mu.Lock()
	defer b.mu.Unlock()
	if target == source {
		return geom.Rigid(geom.Mat3{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, [3]float64{}), nil
	}
	up := func(f string) []string {
		chain := []string{f}
		for n := 0; n < 1000; n++ {
			fr, ok := b.frames[f]
			if !ok {
				break
			}
			f = fr.parent
			chain = append(chain, f)
		}
		return chain
	}
	sChain, tChain := up(source), up(target)
	common := ""
	ti := map[string]int{}
	for i, f := range tChain {
		ti[f] = i
	}
	si := -1
	for i, f := range sChain {
		if _, ok := ti[f]; ok {
			common, si = f, i
			break
		}
	}
	if common == "" {
		return geom.Mat4{}, fmt.Errorf("%w: %s and %s are in different trees", ErrNoPath, target, source)
	}
	if at.IsZero() {
		at = b.latestCommon(sChain[:si], tChain[:ti[common]])
	}
	// common_T_source and common_T_target along the two chains
	cs, err := b.chain(sChain[:si], at, tolerance)
	if err != nil {
		return geom.Mat4{}, err
	}
	ct, err := b.chain(tChain[:ti[common]], at, tolerance)
	if err != nil {
		return geom.Mat4{}, err
	}
	return geom.Mul4(geom.InvertRigid(ct), cs), nil
}

// latestCommon is the newest stamp all the dynamic links have.
func (b *Buffer) latestCommon(chains ...[]string) time.Time {
	var t time.Time
	for _, c := range chains {
		for _, f := range c {
			fr := b.frames[f]
			if fr.static {
				continue
			}
			if s := fr.hist[len(fr.hist)-1].Stamp; t.IsZero() || s.Before(t) {
				t = s
			}
		}
	}
	return t
}

// chain composes the links from frames[0] up to the parent of the last one:
// ancestor_T_frames[0].
func (b *Buffer) chain(frames []string, at time.Time, tol time.Duration) (geom.Mat4, error) {
	m := geom.Rigid(geom.Mat3{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, [3]float64{})
	for _, f := range frames {
		l, err := b.frames[f].at(f, at, tol)
		if err != nil {
			return geom.Mat4{}, err
		}
		m = geom.Mul4(l, m)
	}
	return m, nil
}

// at is the frame's parent_T_child at time t.
func (f *frame) at(name string, t time.Time, tol time.Duration) (geom.Mat4, error) {
	h := f.hist
	if f.static {
		return geom.Compose(h[0].T, h[0].Q)
	}
	first, last := h[0].Stamp, h[len(h)-1].Stamp
	switch {
	case t.Before(first):
		if first.Sub(t) > tol {
			return geom.Mat4{}, fmt.Errorf("%w: %s → %s asked at %s, %v before its oldest transform (history %s … %s)",
				ErrExtrapolation, f.parent, name, stamp(t), first.Sub(t), stamp(first), stamp(last))
		}
		return geom.Compose(h[0].T, h[0].Q)
	case t.After(last):
		if t.Sub(last) > tol {
			return geom.Mat4{}, fmt.Errorf("%w: %s → %s asked at %s, %v after its newest transform (history %s … %s)",
				ErrExtrapolation, f.parent, name, stamp(t), t.Sub(last), stamp(first), stamp(last))
		}
		return geom.Compose(h[len(h)-1].T, h[len(h)-1].Q)
	}
	i, _ := slices.BinarySearchFunc(h, t, func(a Transform, t time.Time) int { return a.Stamp.Compare(t) })
	if h[i].Stamp.Equal(t) {
		return geom.Compose(h[i].T, h[i].Q)
	}
	a, c := h[i-1], h[i]
	u := float64(t.Sub(a.Stamp)) / float64(c.Stamp.Sub(a.Stamp))
	var p [3]float64
	for k := range p {
		p[k] = a.T[k] + u*(c.T[k]-a.T[k])
	}
	return geom.Compose(p, slerp(a.Q, c.Q, u))
}

// slerp interpolates unit quaternions along the shorter arc.
func slerp(a, b geom.Quat, u float64) geom.Quat {
	na := math.Sqrt(a[0]*a[0] + a[1]*a[1] + a[2]*a[2] + a[3]*a[3])
	nb := math.Sqrt(b[0]*b[0] + b[1]*b[1] + b[2]*b[2] + b[3]*b[3])
	for k := range a {
		a[k] /= na
		b[k] /= nb
	}
	d := a[0]*b[0] + a[1]*b[1] + a[2]*b[2] + a[3]*b[3]
	if d < 0 {
		d = -d
		for k := range b {
			b[k] = -b[k]
		}
	}
	var wa, wb float64
	if d > 0.9995 {
		wa, wb = 1-u, u
	} else {
		th := math.Acos(d)
		wa, wb = math.Sin((1-u)*th)/math.Sin(th), math.Sin(u*th)/math.Sin(th)
	}
	return geom.Quat{wa*a[0] + wb*b[0], wa*a[1] + wb*b[1], wa*a[2] + wb*b[2], wa*a[3] + wb*b[3]}
}

func stamp(t time.Time) string { return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond()) }
