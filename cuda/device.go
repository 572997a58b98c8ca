//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"gorgonia.org/cu"
)

// owner serialises all work on the device's context. A CUDA context may be
// current on several OS threads, so instead of handing every operation to a
// dedicated goroutine (two thread wake-ups per op) the caller's
// goroutine is pinned to its thread for the duration of the call, makes the
// context current there and runs the work itself under a mutex. Driver,
// NVRTC-module and cuBLASLt calls therefore still run one at a time, in
// submission order; "owner thread" in comments means inside do.
type owner struct {
	mu     sync.Mutex
	ctx    cu.CUContext
	closed bool
}

// deviceInfo is what the owner learns about the GPU when it starts.
type deviceInfo struct {
	name          string
	major, minor  int
	sms           int
	driver        int
	totalMem      int64
	maxSharedByte int
	// maxSharedOptin is the most shared memory a block may have once the
	// kernel's limit is raised (227 KB on Hopper).
	maxSharedOptin int
}

// startOwner creates the context.
func startOwner(ordinal int) (*owner, deviceInfo, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	info, ctx, err := openDevice(ordinal)
	if err != nil {
		return nil, deviceInfo{}, err
	}
	return &owner{ctx: ctx}, info, nil
}

func openDevice(ordinal int) (deviceInfo, cu.CUContext, error) {
	var info deviceInfo
	n, err := cu.NumDevices()
	if err != nil {
		return info, cu.CUContext{}, fmt.Errorf("cuda: cannot count GPUs (is the NVIDIA driver loaded?): %w", err)
	}
	if ordinal < 0 || ordinal >= n {
		return info, cu.CUContext{}, fmt.Errorf("cuda: device %d requested but %d GPU(s) visible", ordinal, n)
	}
	dev := cu.Device(ordinal)
	ctx, err := dev.MakeContext(cu.SchedAuto)
	if err != nil {
		return info, cu.CUContext{}, fmt.Errorf("cuda: cannot create a context on device %d: %w", ordinal, err)
	}
	// 97 is CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, which the binding does not name.
	attrs, err := dev.Attributes(cu.ComputeCapabilityMajor, cu.ComputeCapabilityMinor, cu.MultiprocessorCount, cu.MaxSharedMemoryPerBlock, cu.DeviceAttribute(97))
	if err != nil {
		ctx.Destroy()
		return info, cu.CUContext{}, fmt.Errorf("cuda: cannot read device %d attributes: %w", ordinal, err)
	}
	info.major, info.minor, info.sms, info.maxSharedByte, info.maxSharedOptin = attrs[0], attrs[1], attrs[2], attrs[3], attrs[4]
	info.name, _ = dev.Name()
	info.totalMem, _ = dev.TotalMem()
	info.driver = cu.Version()
	return info, ctx, nil
}

// errClosed is returned for work submitted after Close.
var errClosed = errors.New("cuda: backend is closed")

// do runs fn with the context current on this thread and waits for it.
func (o *owner) do(fn func() error) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return errClosed
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.SetCurrentContext(o.ctx); err != nil {
		return fmt.Errorf("making the CUDA context current: %w", err)
	}
	return fn()
}

// stop destroys the context; later work gets errClosed.
func (o *owner) stop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	o.closed = true
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = cu.SetCurrentContext(o.ctx)
	_ = o.ctx.Destroy()
	_ = cu.SetCurrentContext(cu.CUContext{})
}
