/*
 * The data layer in one include: datasets (HDF5 images and tokens, in-memory tensors),
 * transforms, samplers, caches, and the DataLoader. See docs/data.md.
 */
#pragma once

#include "data/builtin_datasets.h"
#include "data/collate.h"
#include "data/data_loader.h"
#include "data/dataset.h"
#include "data/dataset_writer.h"
#include "data/disk_cache.h"
#include "data/hdf5_image_dataset.h"
#include "data/hdf5_token_dataset.h"
#include "data/idx_reader.h"
#include "data/image_transforms.h"
#include "data/memory_cache.h"
#include "data/sampler.h"
#include "data/text_corpus.h"
#include "data/text_transforms.h"
#include "data/transform.h"
