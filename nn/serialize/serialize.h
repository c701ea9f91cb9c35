/*
 * Umbrella header for Loom's on-disk formats: crash-safe file writes, safetensors files and
 * atomic training checkpoints. docs/checkpoints.md describes the formats and the guarantees.
 */
#pragma once

#include "nn/serialize/async_checkpoint.h"
#include "nn/serialize/atomic_file.h"
#include "nn/serialize/checkpoint.h"
#include "nn/serialize/safetensors.h"
