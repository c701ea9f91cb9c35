/* The data loader: a pass is an OrderedPipeline over the epoch's batches (see data_loader.h). */
#include "data/data_loader.h"

#include <algorithm>
#include <bit>

namespace loom::data {

// ---- LoaderState -------------------------------------------------------------------------------

std::map<std::string, int64_t> LoaderState::to_map() const {
  return {{"epoch", epoch}, {"batch", batch}, {"seed", std::bit_cast<int64_t>(seed)}};
}

LoaderState LoaderState::from_map(const std::map<std::string, int64_t>& values) {
  auto get = [&](const char* key) {
    auto it = values.find(key);
    LOOM_CHECK(it != values.end(), "LoaderState: the checkpoint has no '", key, "' entry");
    return it->second;
  };
  LoaderState s;
  s.epoch = get("epoch");
  s.batch = get("batch");
  s.seed = std::bit_cast<uint64_t>(get("seed"));
  return s;
}

// ---- DataLoader ----------------------------------------------------------------------------------

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
                       TransformPtr transform, std::shared_ptr<const Sampler> sampler)
    : dataset_(std::move(dataset)),
      options_(std::move(options)),
      transform_(std::move(transform)),
      sampler_(std::move(sampler)) {
  LOOM_CHECK(dataset_ != nullptr, "DataLoader: null dataset");
  LOOM_CHECK(dataset_->size() > 0, "DataLoader: the dataset is empty (0 examples)");
  LOOM_CHECK(options_.batch_size() >= 1, "DataLoader: batch_size must be >= 1, got ", options_.batch_size());
  LOOM_CHECK(options_.workers() >= 0, "DataLoader: workers must be >= 0, got ", options_.workers());
  LOOM_CHECK(options_.prefetch() >= 1, "DataLoader: prefetch must be >= 1, got ", options_.prefetch());
  if (sampler_) {
    LOOM_CHECK(!options_.shuffle(),
               "DataLoader: shuffle and a sampler are exclusive (the sampler decides the order)");
  } else {
    default_sampler_ = true;
    if (options_.shuffle())
      sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed());
    else
      sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
  LOOM_CHECK(num_batches() > 0, "DataLoader: drop_last with ", sampler_->size(),
             " samples per epoch and batch_size ", options_.batch_size(), " leaves no batch");
  transfer_ = std::make_unique<DeviceTransfer>(options_.device(), options_.pin_memory());
  host_alloc_ = transfer_->host_allocator();
}

DataLoader::~DataLoader() {
  stop();
}

void DataLoader::stop() {
  pipeline_.reset();
}  // the pipeline's destructor joins its workers

int64_t DataLoader::num_batches() const {
  const int64_t n = sampler_->size(), b = options_.batch_size();
  return options_.drop_last() ? n / b : (n + b - 1) / b;
}

std::shared_ptr<const std::vector<int64_t>> DataLoader::order(int64_t epoch) const {
  if (order_epoch_ != epoch) {
    order_ = std::make_shared<const std::vector<int64_t>>(sampler_->indices(epoch));
    order_epoch_ = epoch;
  }
  return order_;
}

DataLoader::Prepared DataLoader::produce(int64_t epoch, int64_t index,
                                         const std::vector<int64_t>& order) const {
  const int64_t begin = index * options_.batch_size();
  const int64_t end = std::min<int64_t>(begin + options_.batch_size(), static_cast<int64_t>(order.size()));
  std::vector<Example> examples;
  examples.reserve(static_cast<size_t>(end - begin));
  for (int64_t k = begin; k < end; ++k) {
    const int64_t i = order[static_cast<size_t>(k)];
    try {
      Example e = dataset_->get(i);
      if (transform_) {
        SampleRng rng(options_.seed(), epoch, i);
        e = transform_->apply(e, rng);
      }
      examples.push_back(std::move(e));
    } catch (const std::exception& err) {
      throw Error(::loom::detail::concat("DataLoader: sample ", i, " (epoch ", epoch, ", batch ", index,
                                         ") failed: ", err.what()));
    } catch (...) {
      throw Error(::loom::detail::concat("DataLoader: sample ", i, " (epoch ", epoch, ", batch ", index,
                                         ") failed with an exception that is not a std::exception"));
    }
  }
  Prepared p;
  try {
    p.batch = collate(examples, host_alloc_);
    p.batch.indices.assign(order.begin() + begin, order.begin() + end);
    p.batch.epoch = epoch;
    p.batch.index = index;
    p.copy = transfer_->start(p.batch);
  } catch (const std::exception& err) {
    throw Error(::loom::detail::concat("DataLoader: batch ", index, " of epoch ", epoch, ": ", err.what()));
  }
  return p;
}

DataLoader::Iterator DataLoader::begin() {
  stop();  // a pass left early: its prefetched batches are dropped, its position is kept
  if (next_batch_ >= num_batches()) {
    ++epoch_;
    next_batch_ = 0;
  }
  const int64_t epoch = epoch_;
  std::shared_ptr<const std::vector<int64_t>> ord = order(epoch);
  const int workers = options_.workers();
  pipeline_ = std::make_unique<OrderedPipeline<Prepared>>(
      next_batch_, num_batches(), workers, std::max<int64_t>(options_.prefetch(), workers),
      [this, epoch, ord](int64_t b) { return produce(epoch, b, *ord); });
  Iterator it(this);
  ++it;  // the first batch
  return it;
}

bool DataLoader::next(Batch& out) {
  if (!pipeline_ || pipeline_->done()) {
    stop();
    return false;
  }
  Prepared p;
  try {
    p = pipeline_->next();
    DeviceTransfer::finish(p.copy);
  } catch (...) {
    stop();  // every worker joined before the error reaches the caller
    throw;
  }
  out = std::move(p.batch);
  next_batch_ = out.index + 1;
  return true;
}

LoaderState DataLoader::state() const {
  if (next_batch_ >= num_batches()) return {epoch_ + 1, 0, options_.seed()};
  return {epoch_, next_batch_, options_.seed()};
}

void DataLoader::load_state(const LoaderState& state) {
  LOOM_CHECK(state.epoch >= 0 && state.batch >= 0 && state.batch <= num_batches(),
             "DataLoader: cannot resume at epoch ", state.epoch, ", batch ", state.batch, ": an epoch has ",
             num_batches(), " batches");
  stop();
  epoch_ = state.epoch;
  next_batch_ = state.batch;
  if (state.seed != options_.seed()) {
    options_.seed(state.seed);
    if (default_sampler_ && options_.shuffle())
      sampler_ = std::make_shared<RandomSampler>(dataset_->size(), state.seed);
    order_epoch_ = -1;
  }
}

void DataLoader::set_epoch(int64_t epoch) {
  LOOM_CHECK(epoch >= 0, "DataLoader: epoch ", epoch, " is negative");
  stop();
  epoch_ = epoch;
  next_batch_ = 0;
}

Batch DataLoader::batch(int64_t epoch, int64_t index) const {
  LOOM_CHECK(index >= 0 && index < num_batches(), "DataLoader: batch ", index, " out of range [0, ",
             num_batches(), ")");
  const auto ord = sampler_->indices(epoch);
  Prepared p = produce(epoch, index, ord);
  DeviceTransfer::finish(p.copy);
  return std::move(p.batch);
}

}  // namespace loom::data
