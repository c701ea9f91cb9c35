/*
 * Emulated cuDNN 9 graph (backend) API: the subset that Loom's convolution wrapper
 * (ops/cuda/cudnn_conv.cpp) calls, with the real names, enum values and signatures of cuDNN 9
 * (cudnn_graph.h), implemented in cudnn_descriptors.cpp and cudnn_convolution.cpp.
 *
 * Why: the wrapper is one file for both builds; in the emulated build this folder comes first on
 * the include path. Descriptors take typed attributes and are finalized with the validation
 * cuDNN does; the one engine is a reference convolution (forward, backward data, backward filter)
 * that reads every operand through its strides. What cuDNN rejects is rejected here with the
 * status cuDNN returns (docs/cuda-emulation.md lists them).
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#define CUDNN_MAJOR 9
#define CUDNN_MINOR 19
#define CUDNN_PATCHLEVEL 0
#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)
#define CUDNN_DIM_MAX 8

struct cudnnContext;
typedef struct cudnnContext* cudnnHandle_t;

typedef enum {
  CUDNN_STATUS_SUCCESS = 0,
  CUDNN_STATUS_NOT_INITIALIZED = 1001,
  CUDNN_STATUS_BAD_PARAM = 2000,
  CUDNN_STATUS_BAD_PARAM_NULL_POINTER = 2002,
  CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER = 2003,
  CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED = 2004,
  CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND = 2005,
  CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT = 2006,
  CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH = 2008,
  CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES = 2009,
  CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE = 2010,
  CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE = 2012,
  CUDNN_STATUS_NOT_SUPPORTED = 3000,
  CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN = 3001,
  CUDNN_STATUS_NOT_SUPPORTED_SHAPE = 3002,
  CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE = 3003,
  CUDNN_STATUS_NOT_SUPPORTED_LAYOUT = 3004,
  CUDNN_STATUS_INTERNAL_ERROR = 4000,
  CUDNN_STATUS_EXECUTION_FAILED = 5000,
} cudnnStatus_t;

#define CUDNN_STATUS_CATEGORY(full_error_code) ((full_error_code) / 1000 * 1000)

typedef enum {
  CUDNN_DATA_FLOAT = 0,
  CUDNN_DATA_DOUBLE = 1,
  CUDNN_DATA_HALF = 2,
  CUDNN_DATA_INT8 = 3,
  CUDNN_DATA_INT32 = 4,
  CUDNN_DATA_UINT8 = 6,
  CUDNN_DATA_BFLOAT16 = 9,
  CUDNN_DATA_INT64 = 10,
  CUDNN_DATA_BOOLEAN = 11,
} cudnnDataType_t;

typedef enum { CUDNN_CONVOLUTION = 0, CUDNN_CROSS_CORRELATION = 1 } cudnnConvolutionMode_t;

typedef void* cudnnBackendDescriptor_t;

typedef enum {
  CUDNN_ATTR_CONVOLUTION_COMP_TYPE = 100,
  CUDNN_ATTR_CONVOLUTION_CONV_MODE = 101,
  CUDNN_ATTR_CONVOLUTION_DILATIONS = 102,
  CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES = 103,
  CUDNN_ATTR_CONVOLUTION_POST_PADDINGS = 104,
  CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS = 105,
  CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS = 106,

  CUDNN_ATTR_ENGINEHEUR_MODE = 200,
  CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH = 201,
  CUDNN_ATTR_ENGINEHEUR_RESULTS = 202,

  CUDNN_ATTR_ENGINECFG_ENGINE = 300,
  CUDNN_ATTR_ENGINECFG_KNOB_CHOICES = 302,
  CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE = 303,

  CUDNN_ATTR_EXECUTION_PLAN_HANDLE = 400,
  CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG = 401,
  CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE = 402,

  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA = 700,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA = 701,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC = 702,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W = 703,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X = 704,
  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y = 705,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA = 706,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA = 707,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC = 708,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W = 709,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX = 710,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY = 711,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA = 712,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA = 713,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC = 714,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW = 715,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X = 716,
  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY = 717,

  CUDNN_ATTR_OPERATIONGRAPH_HANDLE = 800,
  CUDNN_ATTR_OPERATIONGRAPH_OPS = 801,
  CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT = 802,

  CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT = 900,
  CUDNN_ATTR_TENSOR_DATA_TYPE = 901,
  CUDNN_ATTR_TENSOR_DIMENSIONS = 902,
  CUDNN_ATTR_TENSOR_STRIDES = 903,
  CUDNN_ATTR_TENSOR_VECTOR_COUNT = 904,
  CUDNN_ATTR_TENSOR_VECTORIZED_DIMENSION = 905,
  CUDNN_ATTR_TENSOR_UNIQUE_ID = 906,
  CUDNN_ATTR_TENSOR_IS_VIRTUAL = 907,
  CUDNN_ATTR_TENSOR_IS_BY_VALUE = 908,

  CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS = 1000,
  CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS = 1001,
  CUDNN_ATTR_VARIANT_PACK_INTERMEDIATES = 1002,
  CUDNN_ATTR_VARIANT_PACK_WORKSPACE = 1003,

  CUDNN_ATTR_ENGINE_OPERATION_GRAPH = 1300,
  CUDNN_ATTR_ENGINE_GLOBAL_INDEX = 1301,
  CUDNN_ATTR_ENGINE_KNOB_INFO = 1302,
  CUDNN_ATTR_ENGINE_NUMERICAL_NOTE = 1303,
  CUDNN_ATTR_ENGINE_LAYOUT_INFO = 1304,
  CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE = 1305,
} cudnnBackendAttributeName_t;

typedef enum {
  CUDNN_TYPE_HANDLE = 0,
  CUDNN_TYPE_DATA_TYPE = 1,
  CUDNN_TYPE_BOOLEAN = 2,
  CUDNN_TYPE_INT64 = 3,
  CUDNN_TYPE_FLOAT = 4,
  CUDNN_TYPE_DOUBLE = 5,
  CUDNN_TYPE_VOID_PTR = 6,
  CUDNN_TYPE_CONVOLUTION_MODE = 7,
  CUDNN_TYPE_HEUR_MODE = 8,
  CUDNN_TYPE_KNOB_TYPE = 9,
  CUDNN_TYPE_NUMERICAL_NOTE = 11,
  CUDNN_TYPE_LAYOUT_TYPE = 12,
  CUDNN_TYPE_ATTRIB_NAME = 13,
  CUDNN_TYPE_POINTWISE_MODE = 14,
  CUDNN_TYPE_BACKEND_DESCRIPTOR = 15,
  CUDNN_TYPE_BEHAVIOR_NOTE = 19,
  CUDNN_TYPE_INT32 = 23,
} cudnnBackendAttributeType_t;

typedef enum {
  CUDNN_BACKEND_POINTWISE_DESCRIPTOR = 0,
  CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR = 1,
  CUDNN_BACKEND_ENGINE_DESCRIPTOR = 2,
  CUDNN_BACKEND_ENGINECFG_DESCRIPTOR = 3,
  CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR = 4,
  CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR = 5,
  CUDNN_BACKEND_INTERMEDIATE_INFO_DESCRIPTOR = 6,
  CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR = 7,
  CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR = 8,
  CUDNN_BACKEND_LAYOUT_INFO_DESCRIPTOR = 9,
  CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR = 10,
  CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR = 11,
  CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR = 12,
  CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR = 13,
  CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR = 15,
  CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR = 16,
  CUDNN_BACKEND_TENSOR_DESCRIPTOR = 17,
} cudnnBackendDescriptorType_t;

typedef enum {
  CUDNN_NUMERICAL_NOTE_TENSOR_CORE = 0,
  CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS = 1,
  CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION = 2,
  CUDNN_NUMERICAL_NOTE_FFT = 3,
  CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC = 4,
  CUDNN_NUMERICAL_NOTE_WINOGRAD = 5,
  CUDNN_NUMERICAL_NOTE_TYPE_COUNT = 10,
} cudnnBackendNumericalNote_t;

typedef enum {
  CUDNN_HEUR_MODE_INSTANT = 0,
  CUDNN_HEUR_MODE_B = 1,
  CUDNN_HEUR_MODE_FALLBACK = 2,
  CUDNN_HEUR_MODE_A = 3,
  CUDNN_HEUR_MODES_COUNT = 4,
} cudnnBackendHeurMode_t;

size_t cudnnGetVersion(void);
const char* cudnnGetErrorString(cudnnStatus_t status);
// The message of the last failed call on this thread (cuDNN 9 keeps one per thread).
void cudnnGetLastErrorString(char* message, size_t max_size);

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle);
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle);
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId);
cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* streamId);

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t descriptorType,
                                           cudnnBackendDescriptor_t* descriptor);
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor);
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor);
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType, int64_t elementCount,
                                       const void* arrayOfElements);
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType,
                                       int64_t requestedElementCount, int64_t* elementCount,
                                       void* arrayOfElements);
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t executionPlan,
                                  cudnnBackendDescriptor_t variantPack);
