/*
 * Tests of the Module base through real layers and the containers: registration errors,
 * dotted names through nested containers, tied parameters, train/eval, to(dtype) keeping the
 * handles an optimizer holds, zero_grad, state_dict order against torch, load_state_dict's
 * strict and non-strict behaviour, apply's order, and printing.
 *
 * The torch model the names are compared with (Block is the anchor's block with its attention
 * as a child, as in tests/nn/test_layers.cpp):
 *
 *   class Net(nn.Module):
 *       def __init__(s, layers):
 *           super().__init__()
 *           s.tok = nn.Embedding(10, 8)
 *           s.blocks = nn.ModuleList([Block(8, 2, 4) for _ in range(layers)])
 *           s.ln = nn.LayerNorm(8)
 *           s.head = nn.Linear(8, 10, bias=False)
 *           s.scale = nn.Parameter(torch.ones(1))
 *           s.register_buffer("steps", torch.zeros((), dtype=torch.long))
 */
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/grad_mode.h"
#include "nn/layers/layers.h"
#include "nn/optim/optimizer.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// Net above. Its own parameter and buffer are registered after the children: torch's order
// (own parameters, own buffers, then children) must not depend on that.
struct Net : nn::Module {
  nn::Embedding tok{10, 8};
  std::shared_ptr<nn::ModuleList> blocks = std::make_shared<nn::ModuleList>();
  nn::LayerNorm ln{8};
  nn::Linear head{8, 10, false};
  Tensor scale, steps;

  explicit Net(int layers) {
    register_module("tok", tok);
    for (int i = 0; i < layers; ++i) blocks->emplace_back<nn::TransformerBlock>(8, 2, 4);
    register_module("blocks", blocks);
    register_module("ln", ln);
    register_module("head", head);
    scale = register_parameter("scale", ones({1}));
    steps = register_buffer("steps", zeros({}, kInt64));
  }

  Tensor forward(const Tensor& idx) override {
    Tensor x = tok(idx);
    for (const auto& block : *blocks) x = block->forward(x);
    return head(ln(x)) * scale;
  }
};

std::vector<std::string> names(const nn::NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& [name, t] : named) out.push_back(name);
  return out;
}

// A head that uses another module's weight (a tied embedding): registered as its own
// parameter, the same tensor.
struct TiedHead : nn::Module {
  Tensor weight;
  explicit TiedHead(const Tensor& shared) { weight = register_parameter("weight", shared); }
  Tensor forward(const Tensor& x) override { return linear(x, weight); }
};

// tok -> head with head.weight = tok.weight (torch: self.head.weight = self.tok.weight).
struct TiedModel : nn::Module {
  nn::Embedding tok{6, 4};
  TiedHead head{tok.weight};
  TiedModel() {
    register_module("tok", tok);
    register_module("head", head);
  }
  Tensor forward(const Tensor& idx) override { return head(tok(idx)); }
};

// An owned copy of every value, to check that a failed load changed nothing.
std::vector<std::vector<double>> snapshot(const nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (const auto& [name, t] : m.state_dict()) out.push_back(values(t));
  return out;
}

// The state dict with every value cloned (a checkpoint, not handles into the module).
nn::StateDict cloned_state(const nn::Module& m) {
  nn::StateDict out;
  for (const auto& [name, t] : m.state_dict()) out.insert(name, t.clone());
  return out;
}

}  // namespace

TEST_CASE("module/registration rejects duplicate, dotted and empty names and bad tensors") {
  nn::Linear linear(2, 3);
  CHECK_THROWS_WITH_AS(linear.register_parameter("weight", zeros({1})),
                       doctest::Contains("cannot register parameter 'weight': the name is already used"),
                       Error);
  CHECK_THROWS_WITH_AS(linear.register_buffer("bias", zeros({1})), doctest::Contains("name is already used"),
                       Error);
  CHECK_THROWS_WITH_AS(linear.register_module("weight", std::make_shared<nn::ReLU>()),
                       doctest::Contains("cannot register module 'weight'"), Error);
  CHECK_THROWS_WITH_AS(linear.register_parameter("a.b", zeros({1})), doctest::Contains("contain no '.'"),
                       Error);
  CHECK_THROWS_WITH_AS(linear.register_buffer("", zeros({1})), doctest::Contains("must be non-empty"), Error);
  CHECK_THROWS_WITH_AS(linear.register_parameter("p", Tensor()), doctest::Contains("undefined tensor"),
                       Error);
  CHECK_THROWS_WITH_AS(linear.register_parameter("i", zeros({1}, kInt64)),
                       doctest::Contains("floating point"), Error);
  CHECK_NOTHROW(linear.register_parameter("frozen_index", zeros({1}, kInt64), false));
  CHECK_THROWS_WITH_AS(linear.register_module("m", std::shared_ptr<nn::ReLU>()),
                       doctest::Contains("null module"), Error);
  CHECK_THROWS_WITH_AS(linear.register_module("self", linear), doctest::Contains("cannot be its own child"),
                       Error);
  // The failed registrations left nothing behind.
  CHECK(names(linear.named_parameters()) == std::vector<std::string>{"weight", "bias", "frozen_index"});
  CHECK(linear.named_buffers().empty());
  CHECK(linear.children().empty());

  nn::Sequential seq;
  CHECK_THROWS_WITH_AS(seq.push_back(nullptr), doctest::Contains("null module"), Error);
  nn::ModuleDict dict;
  CHECK_THROWS_WITH_AS(dict.insert("a.b", std::make_shared<nn::ReLU>()), doctest::Contains("contain no '.'"),
                       Error);
  CHECK(dict.empty());
}

TEST_CASE("module/dotted names through nested ModuleList and Sequential, in torch's order") {
  Net net(2);
  // [k for k, _ in n.named_parameters()]
  CHECK(names(net.named_parameters()) == std::vector<std::string>{"scale",
                                                                  "tok.weight",
                                                                  "blocks.0.ln1.weight",
                                                                  "blocks.0.ln1.bias",
                                                                  "blocks.0.attn.qkv.weight",
                                                                  "blocks.0.attn.qkv.bias",
                                                                  "blocks.0.attn.proj.weight",
                                                                  "blocks.0.attn.proj.bias",
                                                                  "blocks.0.ln2.weight",
                                                                  "blocks.0.ln2.bias",
                                                                  "blocks.0.mlp.0.weight",
                                                                  "blocks.0.mlp.0.bias",
                                                                  "blocks.0.mlp.2.weight",
                                                                  "blocks.0.mlp.2.bias",
                                                                  "blocks.1.ln1.weight",
                                                                  "blocks.1.ln1.bias",
                                                                  "blocks.1.attn.qkv.weight",
                                                                  "blocks.1.attn.qkv.bias",
                                                                  "blocks.1.attn.proj.weight",
                                                                  "blocks.1.attn.proj.bias",
                                                                  "blocks.1.ln2.weight",
                                                                  "blocks.1.ln2.bias",
                                                                  "blocks.1.mlp.0.weight",
                                                                  "blocks.1.mlp.0.bias",
                                                                  "blocks.1.mlp.2.weight",
                                                                  "blocks.1.mlp.2.bias",
                                                                  "ln.weight",
                                                                  "ln.bias",
                                                                  "head.weight"});
  // [k for k, _ in n.named_buffers()]
  CHECK(names(net.named_buffers()) ==
        std::vector<std::string>{"steps", "blocks.0.attn.causal", "blocks.1.attn.causal"});
  // [k for k, _ in n.named_modules()]
  std::vector<std::string> module_names;
  for (const auto& [name, m] : net.named_modules()) module_names.push_back(name);
  CHECK(module_names == std::vector<std::string>{"",
                                                 "tok",
                                                 "blocks",
                                                 "blocks.0",
                                                 "blocks.0.ln1",
                                                 "blocks.0.attn",
                                                 "blocks.0.attn.qkv",
                                                 "blocks.0.attn.proj",
                                                 "blocks.0.ln2",
                                                 "blocks.0.mlp",
                                                 "blocks.0.mlp.0",
                                                 "blocks.0.mlp.1",
                                                 "blocks.0.mlp.2",
                                                 "blocks.1",
                                                 "blocks.1.ln1",
                                                 "blocks.1.attn",
                                                 "blocks.1.attn.qkv",
                                                 "blocks.1.attn.proj",
                                                 "blocks.1.ln2",
                                                 "blocks.1.mlp",
                                                 "blocks.1.mlp.0",
                                                 "blocks.1.mlp.1",
                                                 "blocks.1.mlp.2",
                                                 "ln",
                                                 "head"});
  // The registry and the members are the same tensors.
  CHECK(net.named_parameters()[4].second.is_same(net.blocks->at<nn::TransformerBlock>(0).attn.qkv.weight));
  // 1 + 80 + 2 * (16 + 216 + 72 + 16 + 288 + 264) + 16 + 80
  CHECK(net.num_parameters() == 1 + 80 + 2 * 872 + 16 + 80);
  CHECK(net.parameters(false).size() == 1);
  CHECK(names(net.named_buffers(false)) == std::vector<std::string>{"steps"});
}

TEST_CASE("module/state_dict has torch's order: own parameters, own buffers, then children") {
  Net net(2);
  // list(n.state_dict().keys()) for the torch Net(2)
  CHECK(net.state_dict().keys() == std::vector<std::string>{"scale",
                                                            "steps",
                                                            "tok.weight",
                                                            "blocks.0.ln1.weight",
                                                            "blocks.0.ln1.bias",
                                                            "blocks.0.attn.qkv.weight",
                                                            "blocks.0.attn.qkv.bias",
                                                            "blocks.0.attn.proj.weight",
                                                            "blocks.0.attn.proj.bias",
                                                            "blocks.0.ln2.weight",
                                                            "blocks.0.ln2.bias",
                                                            "blocks.0.mlp.0.weight",
                                                            "blocks.0.mlp.0.bias",
                                                            "blocks.0.mlp.2.weight",
                                                            "blocks.0.mlp.2.bias",
                                                            "blocks.1.ln1.weight",
                                                            "blocks.1.ln1.bias",
                                                            "blocks.1.attn.qkv.weight",
                                                            "blocks.1.attn.qkv.bias",
                                                            "blocks.1.attn.proj.weight",
                                                            "blocks.1.attn.proj.bias",
                                                            "blocks.1.ln2.weight",
                                                            "blocks.1.ln2.bias",
                                                            "blocks.1.mlp.0.weight",
                                                            "blocks.1.mlp.0.bias",
                                                            "blocks.1.mlp.2.weight",
                                                            "blocks.1.mlp.2.bias",
                                                            "ln.weight",
                                                            "ln.bias",
                                                            "head.weight"});
  // BatchNorm's buffers follow its parameters, num_batches_tracked last (torch).
  nn::BatchNorm2d bn(4);
  CHECK(bn.state_dict().keys() ==
        std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  // The entries are detached handles to the module's storage: no copy, no history.
  nn::StateDict sd = net.state_dict();
  CHECK(sd.at("head.weight").shares_storage(net.head.weight));
  CHECK_FALSE(sd.at("head.weight").requires_grad());
}

TEST_CASE("module/a tied parameter appears once and gets the gradient of both uses") {
  TiedModel model;
  nn::Embedding& tok = model.tok;
  CHECK(names(model.named_parameters()) == std::vector<std::string>{"tok.weight"});
  CHECK(model.parameters().size() == 1);
  CHECK(model.num_parameters() == 24);

  // d/dW sum(linear(emb(idx), W)) = the embedding path plus the head path, accumulated in one grad.
  Tensor idx = tensor<int64_t>({1, 4});
  Tensor w64 = tok.weight.detach().to(kFloat64);
  model(idx).sum().backward();
  // By hand: the head adds sum_i x_i (every row of W gets the sum of the looked-up rows); the
  // embedding adds, to rows 1 and 4, the column sums of W (sum over the output units).
  const std::vector<double> w = values(w64);
  std::vector<double> expected(24, 0.0);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 4; ++c) expected[r * 4 + c] = w[1 * 4 + c] + w[4 * 4 + c];
  for (int64_t r : {1, 4})
    for (int64_t c = 0; c < 4; ++c) {
      double column_sum = 0;
      for (int64_t o = 0; o < 6; ++o) column_sum += w[o * 4 + c];
      expected[r * 4 + c] += column_sum;
    }
  check_close(tok.weight.grad(), expected);
}

TEST_CASE("module/train and eval reach every descendant") {
  Net net(2);
  CHECK(net.is_training());
  net.eval();
  for (nn::Module* m : net.modules()) CHECK_FALSE(m->is_training());
  net.blocks->train();  // a subtree alone
  CHECK_FALSE(net.is_training());
  CHECK(net.blocks->at<nn::TransformerBlock>(1).mlp.is_training());
  CHECK_FALSE(net.ln.is_training());
  net.train();
  for (nn::Module* m : net.modules()) CHECK(m->is_training());
}

TEST_CASE("module/to(dtype) converts in place: an optimizer's parameter list follows") {
  Net net(1);
  nn::ParamGroup group(net.parameters());  // what an optimizer keeps
  net(tensor<int64_t>({1, 2, 3}, {1, 3})).sum().backward();
  REQUIRE(net.head.weight.grad().defined());

  net.to(kFloat64);
  const std::vector<Tensor> params = net.parameters();
  REQUIRE(params.size() == group.params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    CHECK(group.params[i].is_same(params[i]));
    CHECK(group.params[i].dtype() == kFloat64);
    CHECK(group.params[i].requires_grad());
  }
  CHECK(net.head.weight.dtype() == kFloat64);         // the layer's member too
  CHECK(net.head.weight.grad().dtype() == kFloat64);  // gradients follow
  CHECK(net.steps.dtype() == kInt64);                 // integer and bool buffers stay
  CHECK(net.blocks->at<nn::TransformerBlock>(0).attn.causal.dtype() == kBool);
  // The converted model runs, in float64.
  CHECK(net(tensor<int64_t>({1, 2}, {1, 2})).dtype() == kFloat64);
  net.to(kFloat32);
  CHECK(group.params[0].dtype() == kFloat32);
}

TEST_CASE("module/zero_grad drops or zeroes every gradient") {
  Net net(1);
  net(tensor<int64_t>({1, 2}, {1, 2})).sum().backward();
  for (const Tensor& p : net.parameters()) CHECK(p.grad().defined());
  net.zero_grad(false);
  for (const Tensor& p : net.parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(values(p.grad()) == std::vector<double>(static_cast<size_t>(p.numel()), 0.0));
  }
  net.zero_grad();
  for (const Tensor& p : net.parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("module/strict load_state_dict lists every problem and changes nothing") {
  manual_seed(1);
  Net source(1);
  manual_seed(2);
  Net target(1);
  const auto before = snapshot(target);

  // Missing and unexpected keys, all of them in one message.
  nn::StateDict state = cloned_state(source);
  nn::StateDict partial;
  for (const auto& [name, t] : state)
    if (name != "ln.bias" && name != "steps") partial.insert(name, t);
  partial.insert("ln.gain", zeros({8}));
  try {
    target.load_state_dict(partial);
    FAIL("load_state_dict accepted a state dict with missing and unexpected keys");
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK(message.find("Error(s) in loading state_dict for Net") != std::string::npos);
    CHECK(message.find("missing keys: 'steps', 'ln.bias'") != std::string::npos);
    CHECK(message.find("unexpected keys: 'ln.gain'") != std::string::npos);
  }
  CHECK(snapshot(target) == before);

  // A shape mismatch names the key and both shapes, even when loading is not strict.
  nn::StateDict wrong_shape = cloned_state(source);
  wrong_shape.set("blocks.0.attn.qkv.weight", zeros({24, 4}));
  for (bool strict : {true, false}) {
    CHECK_THROWS_WITH_AS(
        target.load_state_dict(wrong_shape, strict),
        doctest::Contains("size mismatch for 'blocks.0.attn.qkv.weight': the checkpoint has shape "
                          "[24, 4], the module has [24, 8]"),
        Error);
  }
  CHECK(snapshot(target) == before);

  // The complete state loads and then equals the source.
  CHECK_NOTHROW(target.load_state_dict(state));
  CHECK(snapshot(target) == snapshot(source));
}

TEST_CASE("module/non-strict load_state_dict loads what matches and reports the rest") {
  manual_seed(3);
  Net source(1);
  Net target(1);
  nn::StateDict state;
  state.insert("head.weight", source.head.weight.detach().to(kFloat64));  // converted to the module's dtype
  state.insert("extra", zeros({2}));
  nn::LoadStateDictResult result = target.load_state_dict(state, false);
  CHECK(result.unexpected_keys == std::vector<std::string>{"extra"});
  CHECK(result.missing_keys.size() == target.state_dict().size() - 1);
  CHECK(result.missing_keys.front() == "scale");
  CHECK(target.head.weight.dtype() == kFloat32);
  CHECK(equal(target.head.weight, source.head.weight));
  CHECK_FALSE(equal(target.tok.weight, source.tok.weight));
}

TEST_CASE("module/apply visits the children first, in torch's order") {
  // m = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Linear(2, 2)))
  // m.apply(lambda mod: order.append(type(mod).__name__))
  // -> ['Linear', 'ReLU', 'Linear', 'Sequential', 'Sequential']
  nn::Sequential model(
      std::make_shared<nn::Linear>(2, 2),
      std::make_shared<nn::Sequential>(std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(2, 2)));
  std::vector<std::string> order;
  model.apply([&](nn::Module& m) { order.push_back(m.type_name()); });
  CHECK(order == std::vector<std::string>{"Linear", "ReLU", "Linear", "Sequential", "Sequential"});

  // The usual use: re-initialise every layer of a kind.
  model.apply([](nn::Module& m) {
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) nn::init::zeros_(linear->bias);
  });
  CHECK(values(model.at<nn::Linear>(0).bias) == std::vector<double>{0, 0});
  CHECK(values(model.at<nn::Sequential>(1).at<nn::Linear>(1).bias) == std::vector<double>{0, 0});
}

TEST_CASE("module/printing reads like torch's print(model), with parameter counts") {
  // print(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
  //                     nn.Flatten(), nn.Linear(8 * 4 * 4, 10), nn.Dropout(0.1))) gives these lines
  // without the "# params" comments, and "Dropout(p=0.1, inplace=False)" (Loom's Dropout has no
  // in-place form). Counts: 224, 16, 1290 and 1530 in all.
  nn::Sequential model(std::make_shared<nn::Conv2d>(3, 8, 3, nn::Conv2dOptions{.padding = 1}),
                       std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
                       std::make_shared<nn::Linear>(8 * 4 * 4, 10), std::make_shared<nn::Dropout>(0.1));
  CHECK(model.to_string() ==
        "Sequential(\n"
        "  (0): Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))  # 224 params\n"
        "  (1): BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)  # 16 params\n"
        "  (2): ReLU()\n"
        "  (3): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
        "  (4): Flatten(start_dim=1, end_dim=-1)\n"
        "  (5): Linear(in_features=128, out_features=10, bias=True)  # 1,290 params\n"
        "  (6): Dropout(p=0.1)\n"
        ")  # 1,530 params");

  // The other layers' extra_repr, against torch's print of the same layers:
  //   LayerNorm((128,), eps=1e-05, elementwise_affine=True), GELU(approximate='tanh'),
  //   Embedding(65, 128, padding_idx=0), AvgPool2d(kernel_size=3, stride=2, padding=1),
  //   Conv2d(4, 8, kernel_size=(3, 5), stride=(2, 2), dilation=(2, 2), groups=4, bias=False),
  //   BatchNorm1d(4, eps=0.001, momentum=None, affine=True, track_running_stats=True),
  //   SiLU(), Tanh(), Sigmoid(), Identity(), Linear(in_features=3, out_features=4, bias=False)
  CHECK(nn::LayerNorm(128).extra_repr() == "(128,), eps=1e-05, elementwise_affine=True");
  CHECK(nn::LayerNorm({2, 3}).extra_repr() == "(2, 3), eps=1e-05, elementwise_affine=True");
  CHECK(nn::GELU("tanh").extra_repr() == "approximate='tanh'");
  CHECK(nn::Embedding(65, 128, 0).extra_repr() == "65, 128, padding_idx=0");
  CHECK(nn::AvgPool2d(3, 2, 1).extra_repr() == "kernel_size=3, stride=2, padding=1");
  CHECK(nn::Conv2d(4, 8, {3, 5}, {.stride = 2, .dilation = 2, .groups = 4, .bias = false}).extra_repr() ==
        "4, 8, kernel_size=(3, 5), stride=(2, 2), dilation=(2, 2), groups=4, bias=False");
  CHECK(nn::BatchNorm1d(4, 1e-3, std::nullopt).extra_repr() ==
        "4, eps=0.001, momentum=None, affine=True, track_running_stats=True");
  CHECK(nn::Linear(3, 4, false).extra_repr() == "in_features=3, out_features=4, bias=False");
  CHECK(nn::AdaptiveAvgPool2d({2, 3}).extra_repr() == "output_size=(2, 3)");
  CHECK(nn::Identity().to_string() == "Identity()");
  CHECK(nn::SiLU().to_string() == "SiLU()");
  CHECK(nn::CausalSelfAttention(8, 2, 4, 0.1).extra_repr() ==
        "d_model=8, n_heads=2, max_context=4, dropout=0.1");
  // Python's float repr: repr(1e-4) == '0.0001', repr(1e-5) == '1e-05', repr(100.0) == '100.0',
  // repr(1e16) == '1e+16', repr(0.30000000000000004) == '0.30000000000000004'.
  CHECK(nn::LayerNorm(2, 1e-4).extra_repr() == "(2,), eps=0.0001, elementwise_affine=True");
  CHECK(nn::LayerNorm(2, 100.0).extra_repr() == "(2,), eps=100.0, elementwise_affine=True");
  CHECK(nn::LayerNorm(2, 1e16).extra_repr() == "(2,), eps=1e+16, elementwise_affine=True");
  CHECK(nn::LayerNorm(2, 0.1 + 0.2).extra_repr() == "(2,), eps=0.30000000000000004, elementwise_affine=True");
}

// ---- containers ------------------------------------------------------------------------------

TEST_CASE("module/Sequential chains forward and indexes like a Python list") {
  manual_seed(4);
  auto first = std::make_shared<nn::Linear>(3, 4);
  nn::Sequential seq(first, std::make_shared<nn::ReLU>());
  nn::Linear& last = seq.emplace_back<nn::Linear>(4, 2);
  CHECK(seq.size() == 3);
  Tensor x = randn({5, 3});
  CHECK(equal(seq(x), last(first->forward(x).relu())));
  CHECK(&seq[-1] == &last);
  CHECK(&seq.at<nn::Linear>(0) == first.get());
  CHECK(seq.ptr(0) == first);
  int count = 0;
  for (const auto& m : seq) count += m != nullptr;
  CHECK(count == 3);
  CHECK_THROWS_WITH_AS(seq[3], doctest::Contains("Sequential: index 3 is out of range for 3 modules"), Error);
  CHECK_THROWS_WITH_AS(seq[-4], doctest::Contains("index -4 is out of range"), Error);
  CHECK_THROWS_WITH_AS(
      seq.at<nn::Conv2d>(1),
      doctest::Contains("Sequential::at<Conv2d>(1): the module at that index is a ReLU, not a Conv2d"),
      Error);
  nn::Sequential empty_seq;
  CHECK(empty_seq(x).is_same(x));
  // From a vector, as when the layers come from a config.
  nn::Sequential from_vector(std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::Tanh>()});
  CHECK(names(from_vector.named_parameters()).empty());
  CHECK(from_vector.named_children()[0].first == "0");

  // A module without a single-tensor forward says so.
  nn::Sequential with_list(std::make_shared<nn::ModuleList>());
  CHECK_THROWS_WITH_AS(with_list(x), doctest::Contains("ModuleList has no forward(const Tensor&)"), Error);
}

TEST_CASE("module/ModuleList and ModuleDict keep order, names and checked access") {
  nn::ModuleList list;
  list.emplace_back<nn::Linear>(2, 2);
  list.push_back(std::make_shared<nn::LayerNorm>(2));
  CHECK(names(list.named_parameters()) ==
        std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"});
  CHECK(list.at<nn::LayerNorm>(-1).normalized_shape() == std::vector<int64_t>{2});

  nn::ModuleDict dict;
  dict.emplace<nn::Linear>("proj", 2, 3);
  dict.insert("act", std::make_shared<nn::GELU>());
  dict.emplace<nn::LayerNorm>("norm", 3);
  CHECK(dict.keys() == std::vector<std::string>{"proj", "act", "norm"});
  CHECK(dict.contains("act"));
  CHECK_FALSE(dict.contains("missing"));
  CHECK(dict["act"].type_name() == "GELU");
  CHECK(dict.at<nn::Linear>("proj").out_features() == 3);
  CHECK(names(dict.named_parameters()) ==
        std::vector<std::string>{"proj.weight", "proj.bias", "norm.weight", "norm.bias"});
  std::vector<std::string> iterated;
  for (const auto& [key, module] : dict) iterated.push_back(key + "=" + module->type_name());
  CHECK(iterated == std::vector<std::string>{"proj=Linear", "act=GELU", "norm=LayerNorm"});
  CHECK_THROWS_WITH_AS(dict["missing"], doctest::Contains("no key 'missing' (keys: 'proj', 'act', 'norm')"),
                       Error);
  CHECK_THROWS_WITH_AS(dict.insert("act", std::make_shared<nn::ReLU>()), doctest::Contains("already present"),
                       Error);
  CHECK_THROWS_WITH_AS(dict.at<nn::Linear>("norm"),
                       doctest::Contains("the module under that key is a LayerNorm, not a Linear"), Error);
  CHECK(dict.size() == 3);
}

TEST_CASE("module/replace_module swaps an owned child and refuses a member") {
  manual_seed(3);
  nn::Sequential seq(std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::ReLU>());
  Tensor x = randn({2, 4});
  auto head = std::make_shared<nn::Linear>(4, 5);
  seq.replace_module("0", head);
  CHECK(seq(x).sizes() == IntArrayRef{2, 5});  // forward goes through the new layer
  CHECK(seq.named_parameters()[0].first == "0.weight");
  CHECK(seq.named_parameters()[0].second.is_same(head->weight));
  CHECK_THROWS_WITH_AS(seq.replace_module("7", head), doctest::Contains("no child named '7'"), Error);

  struct Holder : nn::Module {
    nn::Linear fc{2, 2};
    Holder() { register_module("fc", fc); }
  } holder;
  CHECK_THROWS_WITH_AS(holder.replace_module("fc", std::make_shared<nn::Linear>(2, 2)),
                       doctest::Contains("assign through the member"), Error);
}

TEST_CASE("module/named_modules lists a module shared by two parents once") {
  auto shared = std::make_shared<nn::Linear>(2, 2);
  nn::Sequential a(shared, std::make_shared<nn::ReLU>(), shared);
  const nn::Module& view = a;
  std::vector<std::string> names;
  for (const auto& [name, module] : view.named_modules()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"", "0", "1"});
  CHECK(a.modules().size() == 3);
  CHECK(a.parameters().size() == 2);
}

TEST_CASE("module/replace_module keeps ModuleList and ModuleDict indexing in step") {
  nn::ModuleList list;
  list.push_back(std::make_shared<nn::ReLU>());
  list.replace_module("0", std::make_shared<nn::Tanh>());
  CHECK(list[0].type_name() == "Tanh");
  nn::ModuleDict dict;
  dict.insert("act", std::make_shared<nn::ReLU>());
  dict.replace_module("act", std::make_shared<nn::SiLU>());
  CHECK(dict["act"].type_name() == "SiLU");
  CHECK(dict.named_children()[0].second->type_name() == "SiLU");
}

namespace {
// The model of docs/nn.md, "Writing a model", verbatim.
struct DocsNet : nn::Module {
  nn::Conv2d conv{1, 16, 3, {.padding = 1}};
  nn::BatchNorm2d bn{16};
  nn::Linear fc{16 * 14 * 14, 10};
  DocsNet() {
    register_module("conv", conv);
    register_module("bn", bn);
    register_module("fc", fc);
  }
  Tensor forward(const Tensor& x) override {  // [N, 1, 28, 28] -> [N, 10]
    Tensor h = max_pool2d(bn(conv(x)).relu(), {2, 2});
    return fc(h.flatten(1));
  }
};
}  // namespace

TEST_CASE("module/the docs/nn.md example builds, runs and prints") {
  DocsNet net;
  CHECK(net(randn({2, 1, 28, 28})).sizes() == IntArrayRef{2, 10});
  CHECK(net.num_parameters() == 16 * 9 + 16 + 2 * 16 + 16 * 14 * 14 * 10 + 10);
  CHECK(net.to_string().starts_with("DocsNet(\n  (conv): Conv2d("));
}
