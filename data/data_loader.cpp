/* The data loader: a pass is an OrderedPipeline over the epoch's batches (see data_loader.h). */
#include "data/data_loader.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <sstream>

namespace loom::data {

// What the workers of one pass use, shared with them rather than reached through the loader:
// a worker stuck past the timeout is detached and may outlive the loader (batch_pipeline.h).
struct DataLoader::Pass {
  std::shared_ptr<const Dataset> dataset;
  TransformPtr transform;
  int64_t batch_size = 1;
  uint64_t seed = 0;
  BatchAllocator host_alloc;
  std::shared_ptr<const DeviceTransfer> transfer;
  int64_t epoch = 0;
  std::shared_ptr<const std::vector<int64_t>> order;
  // Per worker, the dataset index it is reading (-1: none), for the timeout's message.
  std::unique_ptr<std::atomic<int64_t>[]> reading;
};

namespace {

// " on worker 2" / " on the calling thread (workers 0)", and ", file 'x.h5'" when the data has one.
std::string where(const Dataset& dataset, int worker) {
  std::string out = worker < 0 ? " on the calling thread (workers 0)" : " on worker " + std::to_string(worker);
  const std::string file = dataset.source();
  out += file.empty() ? ", data in memory" : ", file '" + file + "'";
  return out;
}

}  // namespace

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
  LOOM_CHECK(options_.timeout() >= 0, "DataLoader: timeout must be >= 0 seconds (0: no limit), got ",
             options_.timeout());
  LOOM_CHECK(options_.timeout() == 0 || options_.workers() >= 1, "DataLoader: timeout ", options_.timeout(),
             " s needs workers >= 1: with 0 workers batches are read on the calling thread, which cannot time "
             "itself out");
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
  transfer_ = std::make_shared<DeviceTransfer>(options_.device(), options_.pin_memory());
  host_alloc_ = transfer_->host_allocator();
}

DataLoader::~DataLoader() {
  stop();
}

void DataLoader::stop() {
  pipeline_.reset();  // the pipeline's destructor joins its workers
  pass_.reset();
}

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

std::shared_ptr<DataLoader::Pass> DataLoader::make_pass(int64_t epoch, std::shared_ptr<const std::vector<int64_t>> order,
                                                       int workers) const {
  auto pass = std::make_shared<Pass>();
  pass->dataset = dataset_;
  pass->transform = transform_;
  pass->batch_size = options_.batch_size();
  pass->seed = options_.seed();
  pass->host_alloc = host_alloc_;
  pass->transfer = transfer_;
  pass->epoch = epoch;
  pass->order = std::move(order);
  const int slots = std::max(workers, 1);
  pass->reading = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(slots));
  for (int w = 0; w < slots; ++w) pass->reading[static_cast<size_t>(w)] = -1;
  return pass;
}

DataLoader::Prepared DataLoader::produce(Pass& pass, int64_t index, int worker) {
  const std::vector<int64_t>& order = *pass.order;
  const int64_t epoch = pass.epoch;
  const Dataset& dataset = *pass.dataset;
  const int64_t begin = index * pass.batch_size;
  const int64_t end = std::min<int64_t>(begin + pass.batch_size, static_cast<int64_t>(order.size()));
  std::atomic<int64_t>& reading = pass.reading[static_cast<size_t>(std::max(worker, 0))];
  try {
    dataset.check_unchanged();  // a stat per batch: the file is still the one opened
  } catch (const std::exception& err) {
    throw Error(::loom::detail::concat("DataLoader: batch ", index, " of epoch ", epoch, where(dataset, worker),
                                       ": ", err.what()));
  }
  std::vector<Example> examples;
  examples.reserve(static_cast<size_t>(end - begin));
  for (int64_t k = begin; k < end; ++k) {
    const int64_t i = order[static_cast<size_t>(k)];
    reading = i;
    try {
      Example e = dataset.get(i);
      if (pass.transform) {
        SampleRng rng(pass.seed, epoch, i);
        e = pass.transform->apply(e, rng);
      }
      examples.push_back(std::move(e));
    } catch (const std::exception& err) {
      throw Error(::loom::detail::concat("DataLoader: sample ", i, " (epoch ", epoch, ", batch ", index,
                                         where(dataset, worker), ") failed: ", err.what()));
    } catch (...) {
      throw Error(::loom::detail::concat("DataLoader: sample ", i, " (epoch ", epoch, ", batch ", index,
                                         where(dataset, worker),
                                         ") failed with an exception that is not a std::exception"));
    }
  }
  reading = -1;
  Prepared p;
  try {
    p.batch = collate(examples, pass.host_alloc);
    p.batch.indices.assign(order.begin() + begin, order.begin() + end);
    p.batch.epoch = epoch;
    p.batch.index = index;
    p.copy = pass.transfer->start(p.batch);
  } catch (const std::exception& err) {
    throw Error(::loom::detail::concat("DataLoader: batch ", index, " of epoch ", epoch, ": ", err.what()));
  }
  return p;
}

std::string DataLoader::timeout_message(const PipelineTimeout& timeout) const {
  std::ostringstream out;
  out << "DataLoader: batch " << timeout.item() << " of epoch " << epoch_ << " was not ready within "
      << options_.timeout() << " s (the loader's timeout)";
  const int w = timeout.worker();
  const int64_t sample = w >= 0 && pass_ ? pass_->reading[static_cast<size_t>(w)].load() : -1;
  if (w >= 0) {
    out << ": worker " << w;
    if (sample >= 0)
      out << " is stuck reading sample " << sample;
    else
      out << " is stuck making it";
  }
  const std::string file = dataset_->source();
  out << (file.empty() ? " (data in memory)" : " of file '" + file + "'")
      << "; the pass has ended, and the stuck worker thread is left to return on its own";
  return out.str();
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
  pass_ = make_pass(epoch, ord, workers);
  // The closure holds the pass, not the loader: see Pass.
  pipeline_ = std::make_unique<OrderedPipeline<Prepared>>(
      next_batch_, num_batches(), workers, std::max<int64_t>(options_.prefetch(), workers),
      [pass = pass_](int64_t b, int worker) { return produce(*pass, b, worker); });
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
    p = pipeline_->next(std::chrono::duration<double>(options_.timeout()));
    DeviceTransfer::finish(p.copy);
  } catch (const PipelineTimeout& timeout) {
    const std::string message = timeout_message(timeout);
    stop();  // joins nothing: the pipeline detached its workers
    throw Error(message);
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
  auto pass = make_pass(epoch, std::make_shared<const std::vector<int64_t>>(sampler_->indices(epoch)), 0);
  Prepared p = produce(*pass, index, -1);
  DeviceTransfer::finish(p.copy);
  return std::move(p.batch);
}

}  // namespace loom::data
