/*
 * SGD, Adam and AdamW against torch.optim (PyTorch 1.13) on fixed tensors, their parameter
 * groups, state dicts and errors, the per-op path for non-contiguous parameters, version
 * counters, and bitwise equality of the fused step at 1 and 2 threads.
 *
 * Every expected vector comes from this Python (torch 1.13), which drives the same two
 * parameters with the same gradients as `run` below:
 *
 *   import torch, math
 *   def init(dtype=torch.float32):
 *       p0 = torch.tensor([math.cos(1.3*i+0.2) for i in range(6)], dtype=dtype).reshape(2,3).requires_grad_()
 *       p1 = torch.tensor([0.5*math.sin(0.9*i-0.4) for i in range(4)], dtype=dtype).requires_grad_()
 *       return p0, p1
 *   def grads(k, scale=1.0, dtype=torch.float32):
 *       g0 = torch.tensor([scale*math.sin(0.7*i+k+0.1) for i in range(6)], dtype=dtype).reshape(2,3)
 *       g1 = torch.tensor([scale*math.cos(1.1*i-0.5*k) for i in range(4)], dtype=dtype)
 *       return g0, g1
 *   def run(make_opt, steps, scale=lambda k: 1.0, dtype=torch.float32, skip1=()):
 *       p0, p1 = init(dtype); opt = make_opt(p0, p1)
 *       for k in range(steps):
 *           g0, g1 = grads(k, scale(k), dtype)
 *           p0.grad = g0; p1.grad = None if k in skip1 else g1
 *           opt.step()
 *       print(p0.detach().flatten().tolist() + p1.detach().tolist())
 *
 * and the call given above each test. Tolerances are assert_close's for the dtype: the fused
 * loop rounds like torch's ops up to the placement of fused multiply-adds.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "autograd/autograd.h"
#include "nn/optim/optim.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;
using loom::nn::Adam;
using loom::nn::AdamW;
using loom::nn::Optimizer;
using loom::nn::ParamGroup;
using loom::nn::SGD;

namespace {

struct Params {
  Tensor p0, p1;  // [2, 3] and [4]
};

Params init_params(DType dtype = kFloat32) {
  std::vector<double> v0, v1;
  for (int i = 0; i < 6; ++i) v0.push_back(std::cos(1.3 * i + 0.2));
  for (int i = 0; i < 4; ++i) v1.push_back(0.5 * std::sin(0.9 * i - 0.4));
  return {make(v0, {2, 3}, dtype).requires_grad_(), make(v1, {4}, dtype).requires_grad_()};
}

void set_grads(Params& p, int k, double scale, bool grad1) {
  std::vector<double> g0, g1;
  for (int i = 0; i < 6; ++i) g0.push_back(scale * std::sin(0.7 * i + k + 0.1));
  for (int i = 0; i < 4; ++i) g1.push_back(scale * std::cos(1.1 * i - 0.5 * k));
  p.p0.mutable_grad() = make(g0, {2, 3}, p.p0.dtype());
  p.p1.mutable_grad() = grad1 ? make(g1, {4}, p.p1.dtype()) : Tensor();
}

std::vector<double> flat_values(const Params& p) {
  std::vector<double> out = values(p.p0);
  for (double v : values(p.p1)) out.push_back(v);
  return out;
}

using MakeOpt = std::function<std::unique_ptr<Optimizer>(Params&)>;

std::vector<double> run(
    const MakeOpt& make_opt, int steps, DType dtype = kFloat32,
    const std::function<double(int)>& scale = [](int) { return 1.0; }, const std::vector<int>& skip1 = {}) {
  Params p = init_params(dtype);
  std::unique_ptr<Optimizer> opt = make_opt(p);
  for (int k = 0; k < steps; ++k) {
    set_grads(p, k, scale(k), std::find(skip1.begin(), skip1.end(), k) == skip1.end());
    opt->step();
  }
  return flat_values(p);
}

void check_values(const std::vector<double>& actual, const std::vector<double>& expected, DType dtype) {
  const std::string bad = mismatch(actual, expected, tol_for(dtype));
  CHECK_MESSAGE(bad.empty(), bad);
}

double ams_scale(int k) {
  return k < 2 ? 1.0 : 0.05;
}

}  // namespace

// ---- against torch.optim -------------------------------------------------------------------

TEST_CASE("SGD without momentum matches torch") {
  // run(lambda a, b: torch.optim.SGD([a, b], lr=0.1), 3)
  auto actual = run(
      [](Params& p) {
        return std::make_unique<SGD>(std::vector<Tensor>{p.p0, p.p1}, nn::SGDOptions{.lr = 0.1});
      },
      3);
  check_values(actual,
               {0.794641554, -0.131881982, -1.06674075, -0.562678576, 0.777789772, 1.12113094, -0.436497658,
                0.012319183, 0.528223693, 0.632450402},
               kFloat32);
}

TEST_CASE("SGD with momentum and dampening matches torch") {
  // run(lambda a, b: torch.optim.SGD([a, b], lr=0.1, momentum=0.9, dampening=0.1), 3)
  auto actual = run(
      [](Params& p) {
        return std::make_unique<SGD>(std::vector<Tensor>{p.p0, p.p1},
                                     nn::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1});
      },
      3);
  check_values(actual,
               {0.722926438, -0.320343167, -1.28331172, -0.705502748, 0.775885046, 1.26104128, -0.664402962,
                -0.113894537, 0.641628921, 0.86154443},
               kFloat32);
}

const std::vector<double> kSgdNesterov = {0.679882646, -0.230644777, -1.10263121,  -0.524499536, 0.86861521,
                                          1.22571409,  -0.62833035,  -0.218323588, 0.510330498,  0.845856786};

TEST_CASE("SGD with Nesterov momentum and weight decay matches torch") {
  // run(lambda a, b: torch.optim.SGD([a, b], lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01), 4)
  auto actual = run(
      [](Params& p) {
        return std::make_unique<SGD>(
            std::vector<Tensor>{p.p0, p.p1},
            nn::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
      },
      4);
  check_values(actual, kSgdNesterov, kFloat32);
}

TEST_CASE("SGD with weight decay and maximize matches torch") {
  // run(lambda a, b: torch.optim.SGD([a, b], lr=0.1, momentum=0.5, weight_decay=0.1, maximize=True), 3)
  auto actual = run(
      [](Params& p) {
        return std::make_unique<SGD>(
            std::vector<Tensor>{p.p0, p.p1},
            nn::SGDOptions{.lr = 0.1, .momentum = 0.5, .weight_decay = 0.1, .maximize = true});
      },
      3);
  check_values(actual,
               {1.17508805, 0.369753629, -0.676880717, -0.507409155, 0.448402494, 0.588582158, 0.170288324,
                0.530119121, 0.387790531, -0.0197200105},
               kFloat32);
}

TEST_CASE("SGD on float64 parameters matches torch") {
  // run(lambda a, b: torch.optim.SGD([a, b], lr=0.1, momentum=0.9, nesterov=True), 3, dtype=torch.float64)
  auto actual = run(
      [](Params& p) {
        return std::make_unique<SGD>(std::vector<Tensor>{p.p0, p.p1},
                                     nn::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
      },
      3, kFloat64);
  check_values(actual,
               {0.5402068916164624, -0.5035220144902558, -1.3807980043529371, -0.67144707017936989,
                0.92546565716342621, 1.4557968518648292, -0.87909148354156286, -0.32899567989950229,
                0.66117928382186275, 1.0943815973243918},
               kFloat64);
}

const std::vector<double> kAdamL2 = {0.944139123, 0.0374038666, -0.964351594, -0.582973659, 0.64226836,
                                     0.948431432, -0.232138455, 0.200175479,  0.50731492,   0.411193341};

TEST_CASE("Adam with L2 weight decay matches torch") {
  // run(lambda a, b: torch.optim.Adam([a, b], lr=0.01, weight_decay=0.1), 4)
  auto actual = run(
      [](Params& p) {
        return std::make_unique<Adam>(std::vector<Tensor>{p.p0, p.p1},
                                      nn::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
      },
      4);
  check_values(actual, kAdamL2, kFloat32);
}

TEST_CASE("AdamW with decoupled weight decay matches torch") {
  // run(lambda a, b: torch.optim.AdamW([a, b], lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1), 4)
  auto actual = run(
      [](Params& p) {
        return std::make_unique<AdamW>(
            std::vector<Tensor>{p.p0, p.p1},
            nn::AdamWOptions{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1});
      },
      4);
  check_values(actual,
               {0.941025972, 0.0384153835, -0.960756004, -0.580320597, 0.643317163, 0.945561409, -0.230564415,
                0.198709413, 0.50536865, 0.409151077},
               kFloat32);
}

TEST_CASE("AdamW's default weight decay is torch's 1e-2") {
  Params p = init_params();
  AdamW opt(std::vector<Tensor>{p.p0, p.p1});
  CHECK(opt.param_groups()[0].option("weight_decay") == 1e-2);
  CHECK(opt.param_groups()[0].lr() == 1e-3);
  Adam adam(std::vector<Tensor>{p.p0});
  CHECK(adam.param_groups()[0].option("weight_decay") == 0.0);
}

TEST_CASE("Adam and AdamW with amsgrad match torch while the second moment shrinks") {
  // Gradients scaled by 0.05 from step 2 on, so that max_exp_avg_sq stays above exp_avg_sq.
  // run(lambda a, b: torch.optim.Adam([a, b], lr=0.02, amsgrad=True), 5, lambda k: 1.0 if k < 2 else 0.05)
  auto adam = run(
      [](Params& p) {
        return std::make_unique<Adam>(std::vector<Tensor>{p.p0, p.p1},
                                      nn::AdamOptions{.lr = 0.02, .amsgrad = true});
      },
      5, kFloat32, ams_scale);
  check_values(adam,
               {0.911132336, -0.00730167609, -1.01679838, -0.627981544, 0.64532119, 0.990508914, -0.273714423,
                0.159353137, 0.557309747, 0.452410668},
               kFloat32);
  // run(lambda a, b: torch.optim.AdamW([a, b], lr=0.02, amsgrad=True, weight_decay=0.05), 5, <same scale>)
  auto adamw = run(
      [](Params& p) {
        return std::make_unique<AdamW>(std::vector<Tensor>{p.p0, p.p1},
                                       nn::AdamWOptions{.lr = 0.02, .weight_decay = 0.05, .amsgrad = true});
      },
      5, kFloat32, ams_scale);
  check_values(adamw,
               {0.906407714, -0.00747144641, -1.01191878, -0.624972284, 0.642181337, 0.985766828,
                -0.272559285, 0.158340156, 0.554688692, 0.450365961},
               kFloat32);
}

TEST_CASE("Adam on float64 parameters with maximize matches torch") {
  // run(lambda a, b: torch.optim.Adam([a, b], lr=0.01, maximize=True, weight_decay=0.02), 3,
  // dtype=torch.float64)
  auto actual = run(
      [](Params& p) {
        return std::make_unique<Adam>(std::vector<Tensor>{p.p0, p.p1},
                                      nn::AdamOptions{.lr = 0.01, .weight_decay = 0.02, .maximize = true});
      },
      3, kFloat64);
  check_values(actual,
               {1.0069898087741305, 0.099827579116401888, -0.91721386230992918, -0.55984302203262337,
                0.63222906034201976, 0.88523861933798487, -0.16523448124900481, 0.26927222495308195,
                0.47220366521076429, 0.34312556743897499},
               kFloat64);
}

// ---- parameter groups ------------------------------------------------------------------------

TEST_CASE("two parameter groups with their own lr and weight decay match torch") {
  // run(lambda a, b: torch.optim.AdamW([{'params': [a], 'lr': 0.01, 'weight_decay': 0.1},
  //                                     {'params': [b], 'lr': 0.05, 'weight_decay': 0.0}]), 3)
  auto adamw = run(
      [](Params& p) {
        return std::make_unique<AdamW>(
            std::vector<ParamGroup>{{{p.p0}, {{"lr", 0.01}, {"weight_decay", 0.1}}},
                                    {{p.p1}, {{"lr", 0.05}, {"weight_decay", 0.0}}}});
      },
      3);
  check_values(adamw,
               {0.950052798, 0.0414606594, -0.964183688, -0.587776482, 0.634988725, 0.940710127, -0.342068255,
                0.0918765515, 0.593883395, 0.521473646},
               kFloat32);
  // run(lambda a, b: torch.optim.SGD([{'params': [a], 'momentum': 0.9}, {'params': [b], 'lr': 0.3}], lr=0.1),
  // 3)
  auto sgd = run(
      [](Params& p) {
        return std::make_unique<SGD>(
            std::vector<ParamGroup>{{{p.p0}, {{"momentum", 0.9}}}, {{p.p1}, {{"lr", 0.3}}}},
            nn::SGDOptions{.lr = 0.1});
      },
      3);
  check_values(sgd,
               {0.69736141, -0.342196167, -1.29117477, -0.695677817, 0.798777103, 1.28623414, -0.920074701,
                -0.442468017, 0.599221289, 1.15164614},
               kFloat32);
}

TEST_CASE("a group's missing options come from the defaults; add_param_group adds a group later") {
  Params p = init_params();
  SGD opt(std::vector<ParamGroup>{{{p.p0}, {{"lr", 0.5}}}}, {.lr = 0.1, .momentum = 0.9});
  const ParamGroup& g0 = opt.param_groups()[0];
  CHECK(g0.lr() == 0.5);
  CHECK(g0.option("momentum") == 0.9);
  CHECK(g0.option("nesterov") == 0.0);
  opt.add_param_group({{p.p1}, {{"momentum", 0.0}}});
  REQUIRE(opt.param_groups().size() == 2);
  CHECK(opt.param_groups()[1].lr() == 0.1);
  CHECK(opt.param_groups()[1].option("momentum") == 0.0);
}

TEST_CASE("ParamGroup::option names the missing option and lists the group's") {
  Params p = init_params();
  Adam opt(std::vector<Tensor>{p.p0});
  CHECK_THROWS_WITH_AS(
      opt.param_groups()[0].option("momentum"),
      doctest::Contains("no option 'momentum'; its options are: amsgrad, beta1, beta2, eps, lr, "
                        "maximize, weight_decay"),
      Error);
}

TEST_CASE("parameters without a gradient are skipped and keep their own step count, as in torch") {
  // run(lambda a, b: torch.optim.Adam([a, b], lr=0.01), 4, skip1=(0, 2))
  auto actual = run(
      [&](Params& p) -> std::unique_ptr<Optimizer> {
        return std::make_unique<Adam>(std::vector<Tensor>{p.p0, p.p1}, nn::AdamOptions{.lr = 0.01});
      },
      4, kFloat32, [](int) { return 1.0; }, {0, 2});
  check_values(actual,
               {0.945429146, 0.0374710634, -0.966733873, -0.585109115, 0.64433676, 0.949693263, -0.211986244,
                0.219699219, 0.49649936, 0.391111493},
               kFloat32);

  Params p = init_params();
  Adam opt(std::vector<Tensor>{p.p0, p.p1});
  set_grads(p, 0, 1.0, false);
  const std::vector<double> before1 = values(p.p1);
  opt.step();
  CHECK(values(p.p1) == before1);
  nn::StateDict state = opt.state_dict();
  CHECK(state.contains("state.0.step"));
  CHECK(state.at("state.0.step").item<int64_t>() == 1);
  CHECK_FALSE(state.contains("state.1.step"));  // no state until the first gradient
}

// ---- state dict --------------------------------------------------------------------------

namespace {

// Runs 2 steps, copies the parameters and the optimizer state into a fresh optimizer, and
// checks that 3 more steps there give bitwise the same parameters as 5 uninterrupted steps.
void check_resume(const MakeOpt& make_opt) {
  const std::vector<double> uninterrupted = run(make_opt, 5, kFloat32, ams_scale);

  Params a = init_params();
  std::unique_ptr<Optimizer> first = make_opt(a);
  for (int k = 0; k < 2; ++k) {
    set_grads(a, k, ams_scale(k), true);
    first->step();
  }
  const nn::StateDict saved = first->state_dict();

  Params b{a.p0.detach().clone().requires_grad_(), a.p1.detach().clone().requires_grad_()};
  std::unique_ptr<Optimizer> second = make_opt(b);
  second->param_groups()[0].lr() = 123.0;  // must be restored from the state
  second->load_state_dict(saved);
  first.reset();  // the restored state must not depend on the first optimizer's tensors
  for (int k = 2; k < 5; ++k) {
    set_grads(b, k, ams_scale(k), true);
    second->step();
  }
  const std::vector<double> resumed = flat_values(b);
  REQUIRE(resumed.size() == uninterrupted.size());
  CHECK(std::memcmp(resumed.data(), uninterrupted.data(), resumed.size() * sizeof(double)) == 0);
}

}  // namespace

TEST_CASE("an optimizer restored from a state dict continues bitwise like the uninterrupted run") {
  SUBCASE("SGD with Nesterov momentum") {
    check_resume([](Params& p) {
      return std::make_unique<SGD>(std::vector<Tensor>{p.p0, p.p1},
                                   nn::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
    });
  }
  SUBCASE("AdamW with amsgrad, two groups") {
    check_resume([](Params& p) {
      return std::make_unique<AdamW>(
          std::vector<ParamGroup>{{{p.p0}, {{"lr", 0.02}}}, {{p.p1}, {{"weight_decay", 0.0}}}},
          nn::AdamWOptions{.amsgrad = true});
    });
  }
}

TEST_CASE("the state dict uses torch's names: state.<i>.<name> and param_groups.<g>.<option>") {
  Params p = init_params();
  SGD opt(std::vector<ParamGroup>{{{p.p0}}, {{p.p1}, {{"lr", 0.2}}}}, {.lr = 0.1, .momentum = 0.9});
  set_grads(p, 0, 1.0, true);
  opt.step();
  const nn::StateDict state = opt.state_dict();
  CHECK(state.at("state.0.momentum_buffer").sizes() == p.p0.sizes());
  CHECK(state.at("state.1.momentum_buffer").sizes() == p.p1.sizes());
  const Tensor& lr1 = state.at("param_groups.1.lr");
  CHECK(lr1.dim() == 0);
  CHECK(lr1.dtype() == kFloat64);
  CHECK(lr1.item<double>() == 0.2);
  CHECK(state.at("param_groups.0.momentum").item<double>() == 0.9);
  CHECK(values(state.at("param_groups.1.params")) == std::vector<double>{1});
  // With momentum, the first step's buffer is the gradient itself (torch clones d_p).
  check_values(values(state.at("state.1.momentum_buffer")), values(p.p1.grad()), kFloat32);
}

TEST_CASE("load_state_dict rejects state that does not fit, naming what differs, and changes nothing") {
  Params p = init_params();
  Adam source(std::vector<Tensor>{p.p0, p.p1});
  set_grads(p, 0, 1.0, true);
  source.step();
  const nn::StateDict good = source.state_dict();

  Params q = init_params();
  Adam target(std::vector<Tensor>{q.p0, q.p1});

  auto without = [&](const std::string& drop) {
    nn::StateDict out;
    for (const auto& [k, v] : good)
      if (k != drop) out.insert(k, v);
    return out;
  };
  auto replaced = [&](const std::string& key, Tensor value) {
    nn::StateDict out;
    for (const auto& [k, v] : good) out.insert(k, k == key ? value : v);
    return out;
  };

  SUBCASE("a different group count") {
    Adam two_groups(std::vector<ParamGroup>{{{q.p0}}, {{q.p1}}});
    CHECK_THROWS_WITH_AS(two_groups.load_state_dict(good),
                         doctest::Contains("group 0 of the state has 2 parameters"), Error);
    nn::StateDict extra = good;
    extra.insert("param_groups.1.lr", scalar_tensor(0.1, kFloat64));
    CHECK_THROWS_WITH_AS(target.load_state_dict(extra), doctest::Contains("has a group 1"), Error);
  }
  SUBCASE("a different parameter count in a group") {
    CHECK_THROWS_WITH_AS(target.load_state_dict(replaced("param_groups.0.params", arange(0, 3, 1, kInt64))),
                         doctest::Contains("group 0 of the state has 3 parameters"), Error);
  }
  SUBCASE("a state tensor of another shape") {
    CHECK_THROWS_WITH_AS(target.load_state_dict(replaced("state.1.exp_avg", zeros({5}))),
                         doctest::Contains("'state.1.exp_avg' has shape [5] but parameter 1 has shape [4]"),
                         Error);
  }
  SUBCASE("state for a parameter that does not exist") {
    nn::StateDict extra = good;
    extra.insert("state.7.exp_avg", zeros({4}));
    CHECK_THROWS_WITH_AS(target.load_state_dict(extra), doctest::Contains("refers to parameter 7"), Error);
  }
  SUBCASE("an option this optimizer does not have (state from another optimizer)") {
    SGD sgd(std::vector<Tensor>{q.p0, q.p1}, {.lr = 0.1});
    CHECK_THROWS_WITH_AS(sgd.load_state_dict(good), doctest::Contains("unknown option"), Error);
  }
  SUBCASE("a missing option or params entry") {
    CHECK_THROWS_WITH_AS(target.load_state_dict(without("param_groups.0.beta2")),
                         doctest::Contains("no 'param_groups.0.beta2'"), Error);
    CHECK_THROWS_WITH_AS(target.load_state_dict(without("param_groups.0.params")),
                         doctest::Contains("no 'param_groups.0.params'"), Error);
  }
  SUBCASE("malformed keys and a bad step count") {
    nn::StateDict extra = good;
    extra.insert("velocity", zeros({1}));
    CHECK_THROWS_WITH_AS(target.load_state_dict(extra), doctest::Contains("unexpected key 'velocity'"),
                         Error);
    CHECK_THROWS_WITH_AS(target.load_state_dict(replaced("state.0.step", scalar_tensor(1.5, kFloat64))),
                         doctest::Contains("non-negative whole count"), Error);
  }
  // Nothing was loaded: the target still has no state and its defaults.
  CHECK(target.state_dict().size() == good.size() - 6);  // no state.<i>.* entries (3 per parameter)
  CHECK(target.param_groups()[0].lr() == 1e-3);
}

// ---- construction and step errors ------------------------------------------------------------

TEST_CASE("constructing an optimizer rejects bad parameters and options") {
  Params p = init_params();
  CHECK_THROWS_WITH_AS(SGD(std::vector<Tensor>{}, {.lr = 0.1}), doctest::Contains("empty parameter list"),
                       Error);
  CHECK_THROWS_WITH_AS(SGD(std::vector<ParamGroup>{{{p.p0}}, {{p.p0}}}, {.lr = 0.1}),
                       doctest::Contains("is already in group 0"), Error);
  CHECK_THROWS_WITH_AS(SGD(std::vector<Tensor>{p.p0, p.p0}, {.lr = 0.1}), doctest::Contains("appears twice"),
                       Error);
  CHECK_THROWS_WITH_AS(SGD(std::vector<ParamGroup>{{{p.p0}, {{"betas", 0.9}}}}, {.lr = 0.1}),
                       doctest::Contains("unknown option 'betas'"), Error);
  Tensor non_leaf = p.p0 * 2.0;
  CHECK_THROWS_WITH_AS(SGD(std::vector<Tensor>{non_leaf}, {.lr = 0.1}), doctest::Contains("is not a leaf"),
                       Error);
  CHECK_THROWS_WITH_AS(SGD(std::vector<Tensor>{arange(0, 4, 1, kInt64)}, {.lr = 0.1}),
                       doctest::Contains("only floating-point tensors"), Error);
  CHECK_THROWS_WITH_AS(SGD(std::vector<Tensor>{p.p0}, {}), doctest::Contains("must be given"), Error);
  CHECK_THROWS_WITH_AS(SGD(std::vector<Tensor>{p.p0}, {.lr = -1.0}),
                       doctest::Contains("invalid learning rate"), Error);
  CHECK_THROWS_WITH_AS(SGD(std::vector<Tensor>{p.p0}, {.lr = 0.1, .nesterov = true}),
                       doctest::Contains("Nesterov momentum requires momentum > 0 and dampening = 0"), Error);
  CHECK_THROWS_WITH_AS(
      SGD(std::vector<Tensor>{p.p0}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
      doctest::Contains("Nesterov"), Error);
  CHECK_THROWS_WITH_AS(Adam(std::vector<Tensor>{p.p0}, {.beta1 = 1.0}), doctest::Contains("invalid beta1=1"),
                       Error);
  CHECK_THROWS_WITH_AS(AdamW(std::vector<Tensor>{p.p0}, {.eps = -1e-8}),
                       doctest::Contains("AdamW: group 0 has an invalid eps"), Error);
}

TEST_CASE("step rejects unsupported dtypes and mismatched gradients and leaves everything unchanged") {
  Params p = init_params();
  Adam opt(std::vector<Tensor>{p.p0, p.p1});
  set_grads(p, 0, 1.0, true);
  p.p1.mutable_grad() = zeros({5});
  const std::vector<double> before = values(p.p0);
  CHECK_THROWS_WITH_AS(
      opt.step(), doctest::Contains("parameter 1 of group 0 has shape [4] but its gradient has shape [5]"),
      Error);
  CHECK(values(p.p0) == before);        // parameter 0 was not updated before the error
  CHECK(opt.state_dict().size() == 8);  // and no state was created: only param_groups.0.*
  p.p1.mutable_grad() = zeros({4}, kFloat64);
  CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("is float32 but its gradient is float64"), Error);

  Tensor half = zeros({3}, kFloat16).requires_grad_();
  SGD sgd(std::vector<Tensor>{half}, {.lr = 0.1});
  half.mutable_grad() = zeros({3}, kFloat16);
  CHECK_THROWS_WITH_AS(sgd.step(),
                       doctest::Contains("has dtype float16; the step supports float32 and float64"), Error);

  SGD edited(std::vector<Tensor>{p.p0}, {.lr = 0.1, .momentum = 0.9});
  edited.param_groups()[0].option("nesterov") = 0.5;
  CHECK_THROWS_WITH_AS(edited.step(), doctest::Contains("'nesterov' of group 0 is a flag"), Error);
}

// ---- zero_grad, versions, non-contiguous parameters -------------------------------------------

TEST_CASE("zero_grad drops the gradients, or zeroes them in place") {
  Params p = init_params();
  SGD opt(std::vector<Tensor>{p.p0, p.p1}, {.lr = 0.1});
  set_grads(p, 0, 1.0, true);
  Tensor g0 = p.p0.grad();
  opt.zero_grad(/*set_to_none=*/false);
  CHECK(p.p0.grad().is_same(g0));
  CHECK(values(p.p0.grad()) == std::vector<double>(6, 0.0));
  opt.zero_grad();
  CHECK_FALSE(p.p0.grad().defined());
  CHECK_FALSE(p.p1.grad().defined());
}

TEST_CASE("a step bumps the version counters of the parameters it updates") {
  Params p = init_params();
  SUBCASE("SGD") {
    SGD opt(std::vector<Tensor>{p.p0, p.p1}, {.lr = 0.1, .momentum = 0.9});
    set_grads(p, 0, 1.0, false);
    const uint64_t v0 = p.p0.version(), v1 = p.p1.version();
    opt.step();
    CHECK(p.p0.version() > v0);
    CHECK(p.p1.version() == v1);  // no gradient, not updated
  }
  SUBCASE("Adam") {
    Adam opt(std::vector<Tensor>{p.p0, p.p1});
    set_grads(p, 0, 1.0, true);
    const uint64_t v0 = p.p0.version(), v1 = p.p1.version();
    opt.step();
    CHECK(p.p0.version() > v0);
    CHECK(p.p1.version() > v1);
  }
  SUBCASE("a tensor saved for backward and then stepped is detected") {
    Tensor w = p.p0;
    Tensor y = (w * w).sum();  // saves w
    SGD opt(std::vector<Tensor>{w}, {.lr = 0.1});
    w.mutable_grad() = ones({2, 3});
    opt.step();
    CHECK_THROWS_AS(y.backward(), Error);
  }
}

TEST_CASE("non-contiguous parameters take the per-op path and match torch") {
  // p0 as a transposed view of a [3, 2] leaf: same values, strides (1, 2).
  auto transposed_p0 = [](Params& p) {
    Tensor base = p.p0.detach().t().contiguous();
    p.p0 = base.t().requires_grad_();
    REQUIRE_FALSE(p.p0.is_contiguous());
  };
  auto nesterov = run(
      [&](Params& p) {
        transposed_p0(p);
        return std::make_unique<SGD>(
            std::vector<Tensor>{p.p0, p.p1},
            nn::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
      },
      4);
  check_values(nesterov, kSgdNesterov, kFloat32);
  auto adam = run(
      [&](Params& p) {
        transposed_p0(p);
        return std::make_unique<Adam>(std::vector<Tensor>{p.p0, p.p1},
                                      nn::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
      },
      4);
  check_values(adam, kAdamL2, kFloat32);
}

// ---- threads ---------------------------------------------------------------------------------

namespace {

// Parameters of odd sizes (so that block boundaries fall inside tensors and tails are
// ragged), 1 to 2 threads, several steps: the fused loops must give the same bits.
std::vector<std::vector<double>> run_threads(
    int threads, const std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>&)>& make_opt,
    DType dtype) {
  const int keep = get_num_threads();
  set_num_threads(threads);
  const std::vector<int64_t> sizes = {70001, 3, 40000, 1, 65537, 127, 33000};
  std::vector<Tensor> params;
  for (size_t i = 0; i < sizes.size(); ++i)
    params.push_back(make(random_values(sizes[i], 100 + i), {sizes[i]}, dtype).requires_grad_());
  std::unique_ptr<Optimizer> opt = make_opt(params);
  for (int k = 0; k < 3; ++k) {
    for (size_t i = 0; i < params.size(); ++i)
      params[i].mutable_grad() =
          make(random_values(sizes[i], 1000 * k + i, 0.1 * (k + 1)), {sizes[i]}, dtype);
    opt->step();
  }
  set_num_threads(keep);
  std::vector<std::vector<double>> out;
  for (const Tensor& p : params) out.push_back(values(p));
  return out;
}

void check_same_bits(const std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>&)>& make_opt,
                     DType dtype) {
  const auto one = run_threads(1, make_opt, dtype);
  const auto two = run_threads(2, make_opt, dtype);
  REQUIRE(one.size() == two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("parameter " << i);
    CHECK(std::memcmp(one[i].data(), two[i].data(), one[i].size() * sizeof(double)) == 0);
  }
}

}  // namespace

TEST_CASE("the fused step gives the same bits with 1 and 2 threads") {
  for (DType dtype : {kFloat32, kFloat64}) {
    INFO(dtype);
    check_same_bits(
        [](std::vector<Tensor>& ps) {
          return std::make_unique<SGD>(
              ps, nn::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
        },
        dtype);
    check_same_bits(
        [](std::vector<Tensor>& ps) {
          return std::make_unique<AdamW>(ps, nn::AdamWOptions{.lr = 1e-2, .amsgrad = true});
        },
        dtype);
    check_same_bits(
        [](std::vector<Tensor>& ps) {
          return std::make_unique<Adam>(ps, nn::AdamOptions{.weight_decay = 0.1});
        },
        dtype);
  }
}

TEST_CASE("the fused step on large tensors matches the per-op path") {
  // The same update computed by tensor ops (the non-contiguous path) as an independent check
  // of the tiles and block boundaries; the two differ only in the placement of rounding.
  const int64_t n = 100003;
  Tensor a = make(random_values(n, 7), {n}, kFloat32).requires_grad_();
  Tensor strided_storage = empty({n, 2}, kFloat32);
  strided_storage.select(1, 0).copy_(a.detach());
  Tensor b = strided_storage.select(1, 0).requires_grad_();
  REQUIRE_FALSE(b.is_contiguous());
  AdamW fused(std::vector<Tensor>{a}, {.lr = 1e-2, .amsgrad = true});
  AdamW by_ops(std::vector<Tensor>{b}, {.lr = 1e-2, .amsgrad = true});
  for (int k = 0; k < 3; ++k) {
    Tensor g = make(random_values(n, 50 + k, 0.3), {n}, kFloat32);
    a.mutable_grad() = g;
    b.mutable_grad() = g.clone();
    fused.step();
    by_ops.step();
  }
  check_values(values(a), values(b), kFloat32);
}
