/*
 * LOOM_EMU_ASAN is 1 where this translation unit is built with AddressSanitizer (GCC says so with
 * __SANITIZE_ADDRESS__, clang with __has_feature): the emulator then tells ASan about the fiber
 * stacks it switches between and the device memory it poisons.
 */
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define LOOM_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOOM_EMU_ASAN 1
#endif
#endif

#ifdef LOOM_EMU_ASAN
#include <sanitizer/asan_interface.h>
#endif
