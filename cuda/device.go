//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"runtime"

	"gorgonia.org/cu"
)

// owner is the one goroutine that holds the CUDA context. A context is bound
// to an OS thread, so every driver, NVRTC-module and cuBLASLt call is sent
// here as a closure and runs on that locked thread, in submission order.
type owner struct {
	work chan func()
	quit chan struct{}
	done chan struct{}
}

// deviceInfo is what the owner learns about the GPU when it starts.
type deviceInfo struct {
	name          string
	major, minor  int
	sms           int
	driver        int
	totalMem      int64
	maxSharedByte int
}

// startOwner creates the context on a new locked goroutine.
func startOwner(ordinal int) (*owner, deviceInfo, error) {
	o := &owner{work: make(chan func()), quit: make(chan struct{}), done: make(chan struct{})}
	type started struct {
		info deviceInfo
		err  error
	}
	ready := make(chan started, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(o.done)
		info, ctx, err := openDevice(ordinal)
		ready <- started{info, err}
		if err != nil {
			return
		}
		defer ctx.Destroy()
		for {
			select {
			case fn := <-o.work:
				fn()
			case <-o.quit:
				return
			}
		}
	}()
	s := <-ready
	if s.err != nil {
		return nil, deviceInfo{}, s.err
	}
	return o, s.info, nil
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
	attrs, err := dev.Attributes(cu.ComputeCapabilityMajor, cu.ComputeCapabilityMinor, cu.MultiprocessorCount, cu.MaxSharedMemoryPerBlock)
	if err != nil {
		ctx.Destroy()
		return info, cu.CUContext{}, fmt.Errorf("cuda: cannot read device %d attributes: %w", ordinal, err)
	}
	info.major, info.minor, info.sms, info.maxSharedByte = attrs[0], attrs[1], attrs[2], attrs[3]
	info.name, _ = dev.Name()
	info.totalMem, _ = dev.TotalMem()
	info.driver = cu.Version()
	return info, ctx, nil
}

// errClosed is returned for work submitted after Close.
var errClosed = errors.New("cuda: backend is closed")

// do runs fn on the context's thread and waits for it.
func (o *owner) do(fn func() error) error {
	res := make(chan error, 1)
	select {
	case o.work <- func() { res <- fn() }:
		return <-res
	case <-o.done:
		return errClosed
	}
}

// stop ends the owner goroutine (destroying the context) and waits for it.
func (o *owner) stop() {
	select {
	case <-o.done:
	default:
		close(o.quit)
		<-o.done
	}
}
