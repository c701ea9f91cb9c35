/*
 * Emulated cuBLAS (filled in by the CUDA backend work).
 */
