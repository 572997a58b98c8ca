package cuda

// The host side of the FP8 cache's layout (kernels/kvfp8.cu): the
// transposed V's row length and key order, for saving and restoring the
// cache with a session (the number format is engine/backend/e4m3).

// fp8Rows is the rows of an FP8 page: the page size rounded up to 16, so
// that the transposed V's rows are whole 16-byte units for the TMA.
func fp8Rows(pageSize int) int { return (pageSize + 15) &^ 15 }

// fp8VtAt is the byte of row r, column c in a page of the transposed V
// whose rows are rows keys long.
func fp8VtAt(r, c, rows int) int { return c*rows + r&^15 + fp8KeyPos(r&15) }

// fp8KeyPos is the stored position of key c (0…15) of a 16-key group in a
// row of the transposed V (f8_key_pos in kernels/fp8.cuh).
func fp8KeyPos(c int) int {
	if c < 8 {
		return 4*(c>>1) + c&1
	}
	return 4*((c-8)>>1) + 2 + c&1
}
