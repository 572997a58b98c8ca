#include "textflag.h"

// Exact GELU, the steps of geluScalar (gelu.go) on 8 (AVX2) or 16 (AVX-512)
// lanes. DX points at geluTable: row i (64 bytes) at i*64(DX), in the order
// of newGeluTable. Per lane, with X the input:
//   A = min(|X|, clamp) (NaN kept: it is VMINPS's second source),
//   S = A with X's sign, H = A·A, L = A·A − H exactly (FMA),
//   H = r = −H/2 − k·ln2 − L/2 with K = round(−H/2·log2e), L = e^r,
//   K = 2^k (0 below 2^−126), L = e = e^r·2^k,
//   K = num(A), D = den(A), S = t = S·num/den·e,
//   result in A = X<0 ? t : X−t.
// Y15/Z15 holds the clamp.

#define GELU_AVX2(X, A, S, H, L, K, D) \
	VANDPS       0(DX), X, A      \
	VXORPS       A, X, S          \
	VMINPS       A, Y15, A        \
	VORPS        A, S, S          \
	VMULPS       A, A, H          \
	VMOVAPS      H, L             \
	VFMSUB231PS  A, A, L          \
	VMULPS       128(DX), H, H    \
	VMULPS       192(DX), H, K    \
	VROUNDPS     $0, K, K         \
	VFNMADD231PS 256(DX), K, H    \
	VFNMADD231PS 320(DX), K, H    \
	VFMADD231PS  128(DX), L, H    \
	VMOVUPS      384(DX), L       \
	VFMADD213PS  448(DX), H, L    \
	VFMADD213PS  512(DX), H, L    \
	VFMADD213PS  576(DX), H, L    \
	VFMADD213PS  640(DX), H, L    \
	VFMADD213PS  704(DX), H, L    \
	VFMADD213PS  704(DX), H, L    \
	VCVTPS2DQ    K, K             \
	VPADDD       1408(DX), K, K   \
	VPXOR        D, D, D          \
	VPMAXSD      D, K, K          \
	VPSLLD       $23, K, K        \
	VMULPS       K, L, L          \
	VMOVUPS      768(DX), K       \
	VFMADD213PS  832(DX), A, K    \
	VFMADD213PS  896(DX), A, K    \
	VFMADD213PS  960(DX), A, K    \
	VFMADD213PS  1024(DX), A, K   \
	VMOVUPS      1088(DX), D      \
	VFMADD213PS  1152(DX), A, D   \
	VFMADD213PS  1216(DX), A, D   \
	VFMADD213PS  1280(DX), A, D   \
	VFMADD213PS  1344(DX), A, D   \
	VFMADD213PS  704(DX), A, D    \
	VMULPS       K, S, S          \
	VDIVPS       D, S, S          \
	VMULPS       L, S, S          \
	VSUBPS       S, X, A          \
	VBLENDVPS    X, S, A, A

// func geluAVX2(x *float32, n int, tab *geluTable)
// n is a multiple of 8; two vectors per iteration for overlap.
TEXT ·geluAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ tab+16(FP), DX
	VMOVUPS 64(DX), Y15

avx2loop:
	CMPQ CX, $16
	JLT  avx2tail
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y7
	GELU_AVX2(Y0, Y1, Y2, Y3, Y4, Y5, Y6)
	GELU_AVX2(Y7, Y8, Y9, Y10, Y11, Y12, Y13)
	VMOVUPS Y1, (DI)
	VMOVUPS Y8, 32(DI)
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  avx2loop

avx2tail:
	CMPQ CX, $8
	JLT  avx2done
	VMOVUPS (DI), Y0
	GELU_AVX2(Y0, Y1, Y2, Y3, Y4, Y5, Y6)
	VMOVUPS Y1, (DI)

avx2done:
	VZEROUPPER
	RET

// The AVX-512F form: integer-domain logic ops (VPANDD…, the float ones
// need AVX512DQ), VRNDSCALEPS for VROUNDPS, and a sign-bit mask in K1 for
// the final select.
#define GELU_AVX512(X, A, S, H, L, K, D) \
	VPANDD       0(DX), X, A      \
	VPXORD       A, X, S          \
	VMINPS       A, Z15, A        \
	VPORD        A, S, S          \
	VMULPS       A, A, H          \
	VMOVAPS      H, L             \
	VFMSUB231PS  A, A, L          \
	VMULPS       128(DX), H, H    \
	VMULPS       192(DX), H, K    \
	VRNDSCALEPS  $0, K, K         \
	VFNMADD231PS 256(DX), K, H    \
	VFNMADD231PS 320(DX), K, H    \
	VFMADD231PS  128(DX), L, H    \
	VMOVUPS      384(DX), L       \
	VFMADD213PS  448(DX), H, L    \
	VFMADD213PS  512(DX), H, L    \
	VFMADD213PS  576(DX), H, L    \
	VFMADD213PS  640(DX), H, L    \
	VFMADD213PS  704(DX), H, L    \
	VFMADD213PS  704(DX), H, L    \
	VCVTPS2DQ    K, K             \
	VPADDD       1408(DX), K, K   \
	VPXORD       D, D, D          \
	VPMAXSD      D, K, K          \
	VPSLLD       $23, K, K        \
	VMULPS       K, L, L          \
	VMOVUPS      768(DX), K       \
	VFMADD213PS  832(DX), A, K    \
	VFMADD213PS  896(DX), A, K    \
	VFMADD213PS  960(DX), A, K    \
	VFMADD213PS  1024(DX), A, K   \
	VMOVUPS      1088(DX), D      \
	VFMADD213PS  1152(DX), A, D   \
	VFMADD213PS  1216(DX), A, D   \
	VFMADD213PS  1280(DX), A, D   \
	VFMADD213PS  1344(DX), A, D   \
	VFMADD213PS  704(DX), A, D    \
	VMULPS       K, S, S          \
	VDIVPS       D, S, S          \
	VMULPS       L, S, S          \
	VSUBPS       S, X, A          \
	VPTESTMD     1472(DX), X, K1  \
	VMOVAPS      S, K1, A

// func geluAVX512(x *float32, n int, tab *geluTable)
// n is a multiple of 16; two vectors per iteration.
TEXT ·geluAVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ tab+16(FP), DX
	VMOVUPS 64(DX), Z15

avx512loop:
	CMPQ CX, $32
	JLT  avx512tail
	VMOVUPS (DI), Z0
	VMOVUPS 64(DI), Z7
	GELU_AVX512(Z0, Z1, Z2, Z3, Z4, Z5, Z6)
	GELU_AVX512(Z7, Z8, Z9, Z10, Z11, Z12, Z13)
	VMOVUPS Z1, (DI)
	VMOVUPS Z8, 64(DI)
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  avx512loop

avx512tail:
	CMPQ CX, $16
	JLT  avx512done
	VMOVUPS (DI), Z0
	GELU_AVX512(Z0, Z1, Z2, Z3, Z4, Z5, Z6)
	VMOVUPS Z1, (DI)

avx512done:
	VZEROUPPER
	RET
