/*
 * The CUDA caching allocator (filled in by the CUDA backend work).
 */
