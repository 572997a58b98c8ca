#include "textflag.h"

// Softmax row kernels behind rowMax (AVX) and expSubSum (AVX2 + FMA, and
// AVX-512F): softmax.go explains the method and the accuracy, and holds the
// same constants. The AVX-512 kernel broadcasts the first lane of each.

// CONST8 defines a 32-byte constant: val (a float32's or int32's bits) in all
// eight lanes, so that it can be a memory operand of a YMM instruction.
#define CONST8(name, val) \
	DATA name<>+0(SB)/4, $val; \
	DATA name<>+4(SB)/4, $val; \
	DATA name<>+8(SB)/4, $val; \
	DATA name<>+12(SB)/4, $val; \
	DATA name<>+16(SB)/4, $val; \
	DATA name<>+20(SB)/4, $val; \
	DATA name<>+24(SB)/4, $val; \
	DATA name<>+28(SB)/4, $val; \
	GLOBL name<>(SB), RODATA|NOPTR, $32

CONST8(expLog2e, 0x3fb8aa3b)   // log2(e)
CONST8(expMagic, 0x4b400000)   // 1.5·2²³: adding it rounds to an integer
CONST8(expLn2Hi, 0x3f317218)   // float32(ln2)
CONST8(expLn2Lo, 0xb102e308)   // ln2 − float32(ln2)
CONST8(expC2, 0x3f000000)      // 0.5
CONST8(expC3, 0x3e2aaa6e)      // 0.166665763
CONST8(expC4, 0x3d2aaa8d)      // 0.0416665561
CONST8(expC5, 0x3c0905c3)      // 0.00836319011
CONST8(expC6, 0x3ab68891)      // 0.0013926198
CONST8(expOne, 0x3f800000)     // 1
CONST8(expLoBound, 0xc2aeac4f) // expLo, −87.33654: below it the result is 0
CONST8(expHiBound, 0x42b00000) // expHi, 88: above it the result is +Inf
CONST8(expInf, 0x7f800000)     // +Inf
CONST8(expBias, 0x0000007f)    // 127, the float32 exponent bias (int32; AVX2 only)

// EXP8 computes R5 = exp(R0 − m) for the eight floats in R0, with m in all
// lanes of Y12; R0–R4 are clobbered.
//
//	s = x − m; e = the rounding error of that subtraction (TwoSum: bv, av)
//	lo, hi = masks s < expLo, s > expHi (false for NaN, which flows through)
//	t = s·log2e + 1.5·2²³: k = round(s/ln2) sits in t's low mantissa bits
//	r = s − k·ln2hi (exact) − k·ln2lo + e
//	p = 1 + r·(1 + r·(c2 + r·(c3 + r·(c4 + r·(c5 + r·c6)))))
//	2^k = (t's bits + 127) << 23: the magic's own bits shift out
//	result = p·2^k, 0 where lo, +Inf where hi
#define EXP8(R0, R1, R2, R3, R4, R5) \
	VSUBPS       Y12, R0, R1; \
	VSUBPS       R0, R1, R2; \
	VSUBPS       R2, R1, R3; \
	VSUBPS       R3, R0, R3; \
	VADDPS       Y12, R2, R2; \
	VSUBPS       R2, R3, R2; \
	VCMPPS       $0x01, expLoBound<>(SB), R1, R0; \
	VCMPPS       $0x1e, expHiBound<>(SB), R1, R3; \
	VMOVUPS      expLog2e<>(SB), R4; \
	VFMADD213PS  expMagic<>(SB), R1, R4; \
	VSUBPS       expMagic<>(SB), R4, R5; \
	VFNMADD231PS expLn2Hi<>(SB), R5, R1; \
	VFNMADD231PS expLn2Lo<>(SB), R5, R1; \
	VADDPS       R2, R1, R1; \
	VMOVUPS      expC6<>(SB), R5; \
	VFMADD213PS  expC5<>(SB), R1, R5; \
	VFMADD213PS  expC4<>(SB), R1, R5; \
	VFMADD213PS  expC3<>(SB), R1, R5; \
	VFMADD213PS  expC2<>(SB), R1, R5; \
	VFMADD213PS  expOne<>(SB), R1, R5; \
	VFMADD213PS  expOne<>(SB), R1, R5; \
	VPADDD       expBias<>(SB), R4, R4; \
	VPSLLD       $23, R4, R4; \
	VMULPS       R4, R5, R5; \
	VANDNPS      R5, R0, R5; \
	VBLENDVPS    R3, expInf<>(SB), R5, R5

// ACC8 adds the eight floats of YR (XR its low half) into the float64 sums
// Y13 (low four) and Y14 (high four).
#define ACC8(XR, YR) \
	VCVTPS2PD    XR, Y15; \
	VADDPD       Y15, Y13, Y13; \
	VEXTRACTF128 $1, YR, X15; \
	VCVTPS2PD    X15, Y15; \
	VADDPD       Y15, Y14, Y14

// func expSubSumAVX2(x *float32, n int, m float32) float64
//
// n a positive multiple of 8. Two vectors per iteration: their results are
// added in float32 (one rounding per pair) before going to the float64 sums.
TEXT ·expSubSumAVX2(SB), NOSPLIT, $0-32
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS m+16(FP), Y12
	VXORPD       Y13, Y13, Y13
	VXORPD       Y14, Y14, Y14
	MOVQ         CX, DX
	SHRQ         $4, DX
	JZ           single

loop16:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y6
	EXP8(Y0, Y1, Y2, Y3, Y4, Y5)
	EXP8(Y6, Y7, Y8, Y9, Y10, Y11)
	VMOVUPS Y5, (SI)
	VMOVUPS Y11, 32(SI)
	VADDPS  Y11, Y5, Y5
	ACC8(X5, Y5)
	ADDQ    $64, SI
	DECQ    DX
	JNZ     loop16

single:
	TESTQ   $8, CX
	JZ      done
	VMOVUPS (SI), Y0
	EXP8(Y0, Y1, Y2, Y3, Y4, Y5)
	VMOVUPS Y5, (SI)
	ACC8(X5, Y5)

done:
	VADDPD       Y14, Y13, Y13
	VEXTRACTF128 $1, Y13, X14
	VADDPD       X14, X13, X13
	VUNPCKHPD    X13, X13, X14
	VADDSD       X14, X13, X13
	VMOVSD       X13, ret+24(FP)
	VZEROUPPER
	RET

// func rowMaxAVX2(x *float32, n int) float32
//
// n a positive multiple of 8. Every lane of four accumulators starts at x[0]
// and keeps acc = x > acc ? x : acc, which is MAXPS with the accumulator as
// its second source: a NaN x leaves acc as it was, a NaN x[0] stays.
TEXT ·rowMaxAVX2(SB), NOSPLIT, $0-20
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS (SI), Y0
	VMOVAPS      Y0, Y1
	VMOVAPS      Y0, Y2
	VMOVAPS      Y0, Y3
	MOVQ         CX, DX
	SHRQ         $5, DX
	JZ           rest

loop32:
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VMAXPS  Y0, Y4, Y0
	VMAXPS  Y1, Y5, Y1
	VMAXPS  Y2, Y6, Y2
	VMAXPS  Y3, Y7, Y3
	ADDQ    $128, SI
	DECQ    DX
	JNZ     loop32

rest:
	ANDQ $24, CX
	SHRQ $3, CX
	JZ   reduce

loop8:
	VMOVUPS (SI), Y4
	VMAXPS  Y0, Y4, Y0
	ADDQ    $32, SI
	DECQ    CX
	JNZ     loop8

reduce:
	// All lanes are NaN or none is, so the order of this reduction does
	// not matter.
	VMAXPS       Y1, Y0, Y0
	VMAXPS       Y3, Y2, Y2
	VMAXPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VMAXPS       X1, X0, X0
	VMOVSS       X0, ret+16(FP)
	VZEROUPPER
	RET

// EXP16 is EXP8 on sixteen floats (AVX-512): R5 = exp(R0 − m) with m in
// Z12 and the constants in Z16–Z28 (see expSubSumAVX512). k is taken back
// out of t as a float and VSCALEFPS does p·2^k. K2 = lanes of K1 where
// s ≥ expLo or s is NaN (the rest come out 0); K3 = lanes of K1 where
// s > expHi (they come out +Inf). K2, K3 and R0–R4 are clobbered.
#define EXP16(R0, R1, R2, R3, R4, R5) \
	VSUBPS       Z12, R0, R1; \
	VSUBPS       R0, R1, R2; \
	VSUBPS       R2, R1, R3; \
	VSUBPS       R3, R0, R3; \
	VADDPS       Z12, R2, R2; \
	VSUBPS       R2, R3, R2; \
	VCMPPS       $0x05, Z26, R1, K1, K2; \
	VCMPPS       $0x1e, Z27, R1, K1, K3; \
	VMOVAPS      Z17, R4; \
	VFMADD231PS  Z16, R1, R4; \
	VSUBPS       Z17, R4, R4; \
	VFNMADD231PS Z18, R4, R1; \
	VFNMADD231PS Z19, R4, R1; \
	VADDPS       R2, R1, R1; \
	VMOVAPS      Z24, R5; \
	VFMADD213PS  Z23, R1, R5; \
	VFMADD213PS  Z22, R1, R5; \
	VFMADD213PS  Z21, R1, R5; \
	VFMADD213PS  Z20, R1, R5; \
	VFMADD213PS  Z25, R1, R5; \
	VFMADD213PS  Z25, R1, R5; \
	VSCALEFPS.Z  R4, R5, K2, R5; \
	VMOVAPS      Z28, K3, R5

// ACC16 adds the sixteen floats of ZR (YR its low half) into the float64
// sums Z13 (low eight) and Z14 (high eight).
#define ACC16(YR, ZR) \
	VCVTPS2PD      YR, Z15; \
	VADDPD         Z15, Z13, Z13; \
	VEXTRACTF64X4  $1, ZR, Y15; \
	VCVTPS2PD      Y15, Z15; \
	VADDPD         Z15, Z14, Z14

// func expSubSumAVX512(x *float32, n int, m float32) float64
//
// Any n ≥ 0: the last n%16 elements go through one masked step. Two vectors
// per iteration, their results added in float32 as in expSubSumAVX2.
TEXT ·expSubSumAVX512(SB), NOSPLIT, $0-32
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS m+16(FP), Z12
	VBROADCASTSS expLog2e<>(SB), Z16
	VBROADCASTSS expMagic<>(SB), Z17
	VBROADCASTSS expLn2Hi<>(SB), Z18
	VBROADCASTSS expLn2Lo<>(SB), Z19
	VBROADCASTSS expC2<>(SB), Z20
	VBROADCASTSS expC3<>(SB), Z21
	VBROADCASTSS expC4<>(SB), Z22
	VBROADCASTSS expC5<>(SB), Z23
	VBROADCASTSS expC6<>(SB), Z24
	VBROADCASTSS expOne<>(SB), Z25
	VBROADCASTSS expLoBound<>(SB), Z26
	VBROADCASTSS expHiBound<>(SB), Z27
	VBROADCASTSS expInf<>(SB), Z28
	VPXORQ       Z13, Z13, Z13
	VPXORQ       Z14, Z14, Z14
	MOVL         $0xffff, AX
	KMOVW        AX, K1
	MOVQ         CX, DX
	SHRQ         $5, DX
	JZ           single16

loop32:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z6
	EXP16(Z0, Z1, Z2, Z3, Z4, Z5)
	EXP16(Z6, Z7, Z8, Z9, Z10, Z11)
	VMOVUPS Z5, (SI)
	VMOVUPS Z11, 64(SI)
	VADDPS  Z11, Z5, Z5
	ACC16(Y5, Z5)
	ADDQ    $128, SI
	DECQ    DX
	JNZ     loop32

single16:
	TESTQ   $16, CX
	JZ      tail
	VMOVUPS (SI), Z0
	EXP16(Z0, Z1, Z2, Z3, Z4, Z5)
	VMOVUPS Z5, (SI)
	ACC16(Y5, Z5)
	ADDQ    $64, SI

tail:
	ANDQ      $15, CX
	JZ        done512
	// K1 = the low n%16 lanes: masked loads and stores do not touch the rest.
	MOVL      $1, AX
	SHLL      CX, AX
	DECL      AX
	KMOVW     AX, K1
	VMOVUPS.Z (SI), K1, Z0
	EXP16(Z0, Z1, Z2, Z3, Z4, Z5)
	VMOVUPS   Z5, K1, (SI)
	ACC16(Y5, Z5)

done512:
	VADDPD        Z14, Z13, Z13
	VEXTRACTF64X4 $1, Z13, Y14
	VADDPD        Y14, Y13, Y13
	VEXTRACTF128  $1, Y13, X14
	VADDPD        X14, X13, X13
	VUNPCKHPD     X13, X13, X14
	VADDSD        X14, X13, X13
	VMOVSD        X13, ret+24(FP)
	VZEROUPPER
	RET
