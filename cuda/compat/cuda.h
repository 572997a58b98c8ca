/* Compatibility shim for gorgonia.org/cu v0.9.6 against CUDA >= 13 headers.
 *
 * It is found before the toolkit's cuda.h because cuda/scripts/run.sh puts
 * -I<repo>/cuda/compat first in CGO_CFLAGS. CUDA 13 re-pointed five driver
 * API names at new entry points with other signatures; the binding still calls
 * them with the old arguments. libcuda keeps exporting the old entry points,
 * so after the real header we point the names back at them.
 */
#ifndef LINGBOTMAP_CUDA_COMPAT_H
#define LINGBOTMAP_CUDA_COMPAT_H

#include_next <cuda.h>

#if defined(CUDA_VERSION) && CUDA_VERSION >= 13000
#ifdef __cplusplus
extern "C" {
#endif

#undef cuCtxCreate
#undef cuMemAdvise
#undef cuMemPrefetchAsync
#undef cuGraphAddDependencies
#undef cuGraphGetEdges

/* Exported by libcuda since CUDA 3.2; the header declares it only internally now. */
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
#define cuCtxCreate cuCtxCreate_v2

/* The unversioned symbols are the CUDA <= 12 signatures. */
CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device);
CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream);
CUresult CUDAAPI cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to, size_t numDependencies);
CUresult CUDAAPI cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges);

#ifdef __cplusplus
}
#endif
#endif /* CUDA_VERSION >= 13000 */

#endif /* LINGBOTMAP_CUDA_COMPAT_H */
