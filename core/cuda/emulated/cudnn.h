/*
 * Emulated cuDNN: the umbrella header, as the real cudnn.h, which includes the graph (backend)
 * API. Loom calls only the backend API (cudnn_graph.h); the legacy convolution, pooling and
 * normalisation functions are not emulated.
 */
#pragma once

#include <cudnn_graph.h>
