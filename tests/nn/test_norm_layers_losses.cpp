/*
 * Tests of the normalisation layers GroupNorm and RMSNorm, the elementwise regression losses
 * (l1, smooth_l1, huber) and binary_cross_entropy on probabilities, and the activation modules:
 * values and gradients against PyTorch 1.13 in float64 (RMSNorm, which 1.13 lacks, against its
 * formula written with torch ops), gradcheck, printing as torch prints, and the errors.
 *
 * Inputs are pat64(shape, seed, scale)[i] = scale * sin(seed + 0.61 i) in row-major order,
 * written in Python as
 *   def pat(shape, seed, scale): n = math.prod(shape); return torch.tensor(
 *       [math.sin(seed + 0.61 * i) * scale for i in range(n)], dtype=torch.float64).reshape(shape)
 */
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "nn/nn.h"
#include "tests/autograd/autograd_test_util.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;
namespace F = loom::nn::functional;

namespace {

Tensor pat64(IntArrayRef shape, double seed, double scale) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(seed + 0.61 * static_cast<double>(i)) * scale;
  return make(v, shape, kFloat64);
}

void check_grad(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                const std::vector<Tensor>& inputs) {
  auto wrapped = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in)}; };
  auto first = autograd::gradcheck(wrapped, inputs);
  CHECK_MESSAGE(first.ok, first.message);
  auto second = autograd::gradgradcheck(wrapped, inputs);
  CHECK_MESSAGE(second.ok, second.message);
}

}  // namespace

// ---- GroupNorm ---------------------------------------------------------------------------------

TEST_CASE("group_norm matches PyTorch: values and the gradients of input, weight and bias") {
  // x = pat((2,6,2,2),1.0,2.0); w = pat((6,),2.0,1.0)+1; b = pat((6,),3.0,1.0)
  // y = F.group_norm(x, 3, w, b, 1e-5); (y * pat((2,6,2,2),4.0,1.0)).sum().backward()
  Tensor x = pat64({2, 6, 2, 2}, 1.0, 2.0).requires_grad_();
  Tensor w = (pat64({6}, 2.0, 1.0) + 1.0).detach().requires_grad_();
  Tensor b = pat64({6}, 3.0, 1.0).requires_grad_();
  nn::GroupNorm norm(3, 6);
  {
    NoGradGuard no_grad;
    norm.weight.copy_(w);
    norm.bias.copy_(b);
  }
  Tensor y = group_norm(x, 3, w, b, 1e-5);
  check_close(y, {2.1979696120870993,   2.5844052714884014,   2.087973289151342,    0.8877386491146924,
                  -1.0232665731550417,  -1.9793180725902058,  -2.3855023238254205,  -2.095307057200244,
                  -1.9399895512150933,  -0.9775768284761902,  -0.13442953111675873, 0.28532576820920214,
                  -0.5928615205416499,  -0.8595207953792051,  -1.235305699348745,   -1.5846691278609653,
                  -0.7981420415727452,  -0.7961209839711678,  -0.7778144388248467,  -0.7498256495408625,
                  -0.19354194266440145, -0.16718293177010568, -0.1661941749452332,  -0.19093232069625304,
                  1.076627573574584,    -0.7188751912250646,  -1.9420716907442481,  -2.1517500984774567,
                  -1.5669860423367783,  -0.26362976161955226, 1.178836956803852,    2.2401106492142664,
                  0.6338312063927951,   0.3251691370867558,   -0.3406890874840099,  -1.1235657660490477,
                  -1.3333285210190247,  -1.4240995606445974,  -1.3285614947965154,  -1.0811752825686003,
                  -0.7423319788891646,  -0.7153824641456569,  -0.7032382111406095,  -0.7102797000765153,
                  -0.21148181495442697, -0.26015500803072306, -0.3036763912393068,  -0.32634762912462906});
  check_close(norm(x), values(y));
  (y * pat64({2, 6, 2, 2}, 4.0, 1.0)).sum().backward();
  check_close(
      x.grad(),
      {0.12299229358103157,   0.0030267343531939217,   -0.06924314607155899,    -0.06774931532387876,
       -0.033342021718044595, -0.05113404590510687,    -0.001694383139845157,   0.097143884224209,
       0.2070020064434772,    0.06872804869404008,     -0.09169018409530875,    -0.21638919941000184,
       0.2007670559323713,    0.08131943317970616,     -0.0648142269129905,     -0.18492293383129357,
       -0.003941982324390485, -0.0016063499388050575,  0.0025730652132544283,   0.007088731517946813,
       0.004225820991872287,  -0.00041314198291691464, -0.003638717031165943,   -0.004287426445795127,
       -0.3109571949278352,   -0.15330077840315914,    0.030916119337948744,    0.17524573298755713,
       -0.028474254954483406, 0.07303588975600216,     0.11946598220940942,     0.09406850399455975,
       -0.03379656897513811,  -0.044706410448903305,   0.012254802787274172,    0.11654093530725257,
       -0.05980363034153999,  -0.0778084311525952,     -0.016002147159246083,   0.10332144998289589,
       0.0029935796523983165, 0.004543172534511852,    0.003700111341205796,    0.0007684915870607568,
       -0.010913981840972975, -0.0062758205740612435,  -0.00012785967847447595, 0.005312306978331966});
  check_close(w.grad(), {-5.551723546787479, -5.316629704926601, -5.3361796763564024, -4.92214633622084,
                         -5.822483370856109, -5.564070322614843});
  check_close(b.grad(), {-1.0356675836576184, 2.73392302850281, -3.1407563573042943, 2.0639918749600517,
                         -0.012260384814695158, -2.0452625383504683});
}

TEST_CASE("group_norm: gradcheck to second order, any trailing dims, 16-bit inputs keep their dtype") {
  check_grad([](const std::vector<Tensor>& in) { return group_norm(in[0], 2, in[1], in[2]); },
             {pat64({2, 4, 3}, 0.3, 1.5).requires_grad_(),
              (pat64({4}, 1.1, 0.5) + 1.0).detach().requires_grad_(), pat64({4}, 2.2, 0.5).requires_grad_()});
  check_grad([](const std::vector<Tensor>& in) { return group_norm(in[0], 1); },
             {pat64({3, 2}, 0.7, 1.0).requires_grad_()});
  // With one group per channel it is instance norm: each (sample, channel) has mean 0.
  Tensor inst = group_norm(pat64({2, 3, 5}, 0.5, 3.0), 3);
  check_close(inst.mean({2}), std::vector<double>(6, 0.0), {0, 1e-12});
  Tensor half = group_norm(pat({2, 4, 3}, 0.1, 1.0).to(kBFloat16), 2, ones({4}), zeros({4}));
  CHECK(half.dtype() == kBFloat16);
  check_close(half.to(kFloat64), values(group_norm(pat({2, 4, 3}, 0.1, 1.0).to(kBFloat16).to(kFloat32), 2)),
              tol_for(kBFloat16));
  CHECK(group_norm(zeros({0, 4, 3}), 2).sizes() == IntArrayRef{0, 4, 3});
}

TEST_CASE("GroupNorm: parameters, printing and errors") {
  nn::GroupNorm norm(2, 6);
  CHECK(values(norm.weight) == std::vector<double>(6, 1.0));
  CHECK(values(norm.bias) == std::vector<double>(6, 0.0));
  CHECK(norm.named_parameters().size() == 2);
  CHECK(norm.extra_repr() == "2, 6, eps=1e-05, affine=True");
  nn::GroupNorm plain(3, 3, 1e-3, false);
  CHECK(!plain.weight.defined());
  CHECK(plain.named_parameters().empty());
  CHECK(plain.extra_repr() == "3, 3, eps=0.001, affine=False");
  CHECK_THROWS_WITH_AS(nn::GroupNorm(4, 6),
                       doctest::Contains("num_channels (6) must be divisible by num_groups (4)"), Error);
  CHECK_THROWS_WITH_AS(norm(zeros({2, 4, 3})),
                       doctest::Contains("GroupNorm: expected input [N, 6, *], got [2, 4, 3]"), Error);
  CHECK_THROWS_WITH_AS(group_norm(zeros({2, 6}), 4),
                       doctest::Contains("group_norm: expected num_groups to divide the 6"), Error);
  CHECK_THROWS_WITH_AS(group_norm(zeros({6}), 3), doctest::Contains("at least 2 dims, got [6]"), Error);
  CHECK_THROWS_WITH_AS(group_norm(zeros({2, 6}), 3, ones({3})),
                       doctest::Contains("expected weight of shape [6]"), Error);
  CHECK_THROWS_WITH_AS(group_norm(arange(12).reshape({2, 6}), 3), doctest::Contains("group_norm"), Error);
}

// ---- RMSNorm -----------------------------------------------------------------------------------

TEST_CASE("rms_norm matches its formula in torch ops, values and gradients") {
  // x = pat((2,3,4),8.0,2.0); w = pat((3,4),9.0,1.0)+1
  // y = x * torch.rsqrt((x*x).mean(dim=(-2,-1), keepdim=True) + 1e-6) * w
  // (y * pat((2,3,4),10.0,1.0)).sum().backward()
  Tensor x = pat64({2, 3, 4}, 8.0, 2.0).requires_grad_();
  Tensor w = (pat64({3, 4}, 9.0, 1.0) + 1.0).detach().requires_grad_();
  Tensor y = rms_norm(x, {3, 4}, w, 1e-6);
  check_close(y, {1.8887944870957152,   0.8024891854574685,  0.07862139165483403,  -0.007288953002189862,
                  -0.11157877472953501, -0.683440993064305,  -1.1638583438678667,  -0.6502935595199076,
                  0.8204707245916041,   2.090711995545419,   2.1227094978567935,   1.1338209097400478,
                  0.8042840456516116,   -0.2704895489459811, -0.31831559205005594, -0.02041977153849271,
                  -0.12964211407430168, -0.3516785168613709, 0.21414378399763884,  1.672803228279855,
                  2.889995315630599,    2.699617877764835,   1.2788015560533708,   -0.05835926545775974});
  (y * pat64({2, 3, 4}, 10.0, 1.0)).sum().backward();
  check_close(x.grad(),
              {-0.17760598046430887, -0.2597146690549442,  -0.11823728874509248, -0.14236057799948681,
               -0.3016996686164275,  -0.18572214586590008, 0.3847088146485085,   1.0026493910064347,
               1.0859613997252855,   0.5588752468036288,   -0.0606644550649591,  -0.2781590089901216,
               -0.9227202444659621,  -0.5695892246811677,  -0.33798507018459534, -0.36236155515407,
               -0.2688557697205208,  0.21062726917961086,  0.7455062184517035,   0.7326875338859831,
               0.05252499405876071,  -0.7248931841407804,  -0.9716806845758564,  -0.6847590277211102});
  check_close(w.grad(),
              {-1.2967355681068011, -0.6477329875602567, 0.07105565459863966, -0.08392960719152243,
               -0.9092383012621547, -1.3214806837020454, -0.7795026719847291, 0.005236587102120938,
               0.0026031920896158467, -0.7839459769860723, -1.3219011344161262, -0.9050839684596749});
  check_grad(
      [](const std::vector<Tensor>& in) { return rms_norm(in[0], {3}, in[1]); },
      {pat64({2, 3}, 0.4, 1.5).requires_grad_(), (pat64({3}, 1.3, 0.5) + 1.0).detach().requires_grad_()});
}

TEST_CASE(
    "rms_norm: the default eps is the computing dtype's epsilon, and 16-bit inputs are normalised in "
    "float32") {
  // A zero row divides 0 by sqrt(eps): finite, 0.
  check_close(rms_norm(zeros({1, 3}), {3}), {0.0, 0.0, 0.0});
  // eps is float32's for float32 (and 16-bit) inputs, float64's for float64 ones: with x tiny
  // enough that x^2 is comparable to them, the results differ as the formula says.
  const double x64 = 1e-4;
  const double want32 = x64 / std::sqrt(x64 * x64 + 1.1920928955078125e-07);
  check_close(rms_norm(make({x64}, kFloat32), {1}), {want32}, tol_for(kFloat32));
  check_close(rms_norm(make({x64}, kFloat64), {1}), {x64 / std::sqrt(x64 * x64 + 2.220446049250313e-16)});
  Tensor big = make({300.0, -400.0}, kBFloat16);  // x^2 overflows no 16-bit type in float32
  Tensor out = rms_norm(big, {2});
  CHECK(out.dtype() == kBFloat16);
  check_close(out.to(kFloat64), {300.0 / std::sqrt(125000.0), -400.0 / std::sqrt(125000.0)},
              tol_for(kBFloat16));
  Tensor h = rms_norm(make({300.0, -400.0}, kFloat16), {2});
  CHECK(h.dtype() == kFloat16);  // 300^2 + 400^2 would be inf in float16
  check_close(h.to(kFloat64), {300.0 / std::sqrt(125000.0), -400.0 / std::sqrt(125000.0)}, tol_for(kFloat16));
}

TEST_CASE("RMSNorm: parameters, printing and errors") {
  nn::RMSNorm norm(4);
  CHECK(values(norm.weight) == std::vector<double>(4, 1.0));
  CHECK(norm.extra_repr() == "(4,), eps=None, elementwise_affine=True");
  nn::RMSNorm two({2, 3}, 1e-5, false);
  CHECK(!two.weight.defined());
  CHECK(two.extra_repr() == "(2, 3), eps=1e-05, elementwise_affine=False");
  Tensor x = pat({5, 4}, 0.2, 2.0);
  check_close(norm(x), values(rms_norm(x, {4}, ones({4}))));
  CHECK_THROWS_WITH_AS(norm(zeros({4, 3})), doctest::Contains("rms_norm: given normalized_shape=[4]"), Error);
  CHECK_THROWS_WITH_AS(rms_norm(zeros({2, 3}), {3}, ones({2})),
                       doctest::Contains("expected weight of shape [3]"), Error);
  CHECK_THROWS_WITH_AS(nn::RMSNorm(std::vector<int64_t>{}), doctest::Contains("at least 1 dim"), Error);
  CHECK_THROWS_WITH_AS(nn::RMSNorm(3, -1.0), doctest::Contains("RMSNorm: expected eps >= 0, got -1"), Error);
}

// ---- l1, smooth_l1, huber ----------------------------------------------------------------------

TEST_CASE("l1_loss, smooth_l1_loss and huber_loss match PyTorch for every reduction, values and gradients") {
  // inp = pat((2,3),5.0,2.0); tgt = pat((2,3),6.0,2.0); l = F.<loss>(inp, tgt, reduction=r, ...)
  // (l * pat(l.shape,7.0,1.0) if r == "none" else l).sum().backward()
  struct Case {
    std::string name;
    std::function<Tensor(const Tensor&, const Tensor&, Reduction)> loss;
    std::vector<double> none, none_grad, sum, sum_grad, mean, mean_grad;
  };
  const std::vector<Case> cases{
      {"l1_loss",
       [](const Tensor& a, const Tensor& b, Reduction r) { return F::l1_loss(a, b, r); },
       {1.3590175529284252, 1.8890149988039502, 1.737637245971652, 0.9594868499863345, 0.1647542564914466,
        1.229567849515977},
       {-0.6569865987187891, -0.970383833000575, -0.9337597718176507, -0.5603248592277947,
        -0.015221451386431743, -0.5852773241430363},
       {7.339478753697786},
       {-1.0, -1.0, -1.0, -1.0, 1.0, 1.0},
       {1.223246458949631},
       {-0.16666666666666666, -0.16666666666666666, -0.16666666666666666, -0.16666666666666666,
        0.16666666666666666, 0.16666666666666666}},
      {"smooth_l1_loss beta 0.5",
       [](const Tensor& a, const Tensor& b, Reduction r) { return F::smooth_l1_loss(a, b, r, 0.5); },
       {1.1090175529284252, 1.6390149988039502, 1.487637245971652, 0.7094868499863345, 0.027143965032049373,
        0.979567849515977},
       {-0.6569865987187891, -0.970383833000575, -0.9337597718176507, -0.5603248592277947,
        -0.005015597811784522, -0.5852773241430363},
       {5.951868462238388},
       {-1.0, -1.0, -1.0, -1.0, 0.3295085129828932, 1.0},
       {0.9919780770397314},
       {-0.16666666666666666, -0.16666666666666666, -0.16666666666666666, -0.16666666666666666,
        0.05491808549714886, 0.16666666666666666}},
      {"huber_loss delta 0.7",
       [](const Tensor& a, const Tensor& b, Reduction r) { return F::huber_loss(a, b, r, 0.7); },
       {0.7063122870498977, 1.077310499162765, 0.9713460721801565, 0.4266407949904341, 0.013571982516024686,
        0.6156974946611838},
       {-0.4598906191031523, -0.6792686831004024, -0.6536318402723554, -0.3922274014594563,
        -0.002507798905892261, -0.4096941269001254},
       {3.810879130560462},
       {-0.7, -0.7, -0.7, -0.7, 0.1647542564914466, 0.7},
       {0.635146521760077},
       {-0.11666666666666665, -0.11666666666666665, -0.11666666666666665, -0.11666666666666665,
        0.02745904274857443, 0.11666666666666665}},
  };
  const Tensor target = pat64({2, 3}, 6.0, 2.0);
  for (const Case& c : cases) {
    INFO(c.name);
    for (Reduction r : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
      Tensor input = pat64({2, 3}, 5.0, 2.0).requires_grad_();
      Tensor l = c.loss(input, target, r);
      const bool none = r == Reduction::None;
      check_close(l, none ? c.none : r == Reduction::Sum ? c.sum : c.mean);
      (none ? l * pat64({2, 3}, 7.0, 1.0) : l).sum().backward();
      check_close(input.grad(), none ? c.none_grad : r == Reduction::Sum ? c.sum_grad : c.mean_grad);
    }
    check_grad([&](const std::vector<Tensor>& in) { return c.loss(in[0], in[1], Reduction::Mean); },
               {pat64({2, 3}, 5.0, 2.0).requires_grad_(), pat64({2, 3}, 6.0, 2.0).requires_grad_()});
  }
}

TEST_CASE("smooth_l1_loss with beta 0 is l1_loss; huber is delta times smooth_l1 with beta delta") {
  Tensor a = pat64({3, 4}, 0.3, 2.0), b = pat64({3, 4}, 1.9, 2.0);
  check_close(F::smooth_l1_loss(a, b, Reduction::None, 0.0), values(F::l1_loss(a, b, Reduction::None)));
  check_close(F::huber_loss(a, b, Reduction::None, 0.8),
              values(F::smooth_l1_loss(a, b, Reduction::None, 0.8) * 0.8));
  CHECK_THROWS_WITH_AS(F::smooth_l1_loss(a, b, Reduction::Mean, -1.0),
                       doctest::Contains("smooth_l1_loss: expected beta >= 0, got -1"), Error);
  CHECK_THROWS_WITH_AS(F::huber_loss(a, b, Reduction::Mean, 0.0),
                       doctest::Contains("huber_loss: expected delta > 0, got 0"), Error);
  CHECK_THROWS_WITH_AS(F::l1_loss(a, zeros({4, 3}, kFloat64)),
                       doctest::Contains("l1_loss: expected target of the input's shape [3, 4], got [4, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::SmoothL1Loss(Reduction::Mean, -0.5), doctest::Contains("SmoothL1Loss"), Error);
  CHECK_THROWS_WITH_AS(nn::HuberLoss(Reduction::Mean, -0.5), doctest::Contains("HuberLoss"), Error);
  check_close(nn::L1Loss(Reduction::Sum)(a, b), values(F::l1_loss(a, b, Reduction::Sum)));
  check_close(nn::SmoothL1Loss(Reduction::None, 0.5)(a, b),
              values(F::smooth_l1_loss(a, b, Reduction::None, 0.5)));
  check_close(nn::HuberLoss(Reduction::Mean, 0.7)(a, b), values(F::huber_loss(a, b, Reduction::Mean, 0.7)));
}

// ---- binary_cross_entropy ----------------------------------------------------------------------

TEST_CASE("binary_cross_entropy matches PyTorch, finite at probabilities 0 and 1") {
  // p = [0, 1e-3, 0.25, 0.5, 0.9, 1]; y = [0, 1, 0.3, 1, 0, 1]; w = [1, 2, 0.5, 1, 3, 1]
  // F.binary_cross_entropy(p, y, weight=w, reduction=r)
  Tensor y = make({0.0, 1.0, 0.3, 1.0, 0.0, 1.0}, kFloat64);
  Tensor w = make({1.0, 2.0, 0.5, 1.0, 3.0, 1.0}, kFloat64);
  Tensor p = make({0.0, 1e-3, 0.25, 0.5, 0.9, 1.0}, kFloat64).requires_grad_();
  check_close(F::binary_cross_entropy(p, y, w, Reduction::None),
              {0.0, 13.815510557964274, 0.3086328795261069, 0.6931471805599453, 6.907755278982138, -0.0});
  check_close(F::binary_cross_entropy(p, y, w, Reduction::Sum), {21.725045897032462});
  Tensor mean = F::binary_cross_entropy(p, y, w);
  check_close(mean, {3.6208409828387436});
  mean.backward();
  // torch's gradient: {0.0, -333.3333333333333, -0.022222222222222216,
  // -0.3333333333333333, 5.000000000000001, 0.0}. Loom's is the clamped loss's own derivative, the same
  // inside (0, 1); at p = 0 with y = 0 it is w (1 - y) / (1 - p) / 6 = 1/6 and at p = 1 with y = 1 it is -w y
  // / p / 6 = -1/6, where torch gives 0 (it caps p (1 - p) below at 1e-12).
  check_close(p.grad(), {1.0 / 6, -333.3333333333333, -0.022222222222222216, -0.3333333333333333,
                         5.000000000000001, -1.0 / 6});
  // A probability at the wrong pole costs 100 per element (the log's clamp), and its gradient is
  // finite.
  Tensor pole = make({0.0, 1.0}, kFloat64).requires_grad_();
  Tensor at_pole = F::binary_cross_entropy(pole, make({1.0, 0.0}, kFloat64), {}, Reduction::None);
  check_close(at_pole, {100.0, 100.0});
  at_pole.sum().backward();
  check_close(pole.grad(), {0.0, 0.0});
  check_grad([&](const std::vector<Tensor>& in) { return F::binary_cross_entropy(in[0], in[1], w); },
             {make({0.1, 0.4, 0.25, 0.5, 0.9, 0.7}, kFloat64).requires_grad_(),
              make({0.2, 1.0, 0.3, 0.6, 0.0, 0.9}, kFloat64).requires_grad_()});
  nn::BCELoss module({w, Reduction::Sum});
  CHECK(module.named_buffers().size() == 1);
  check_close(module(p.detach(), y), {21.725045897032462});
}

TEST_CASE("binary_cross_entropy refuses values outside [0, 1], other shapes and logits") {
  Tensor y = zeros({3});
  CHECK_THROWS_WITH_AS(F::binary_cross_entropy(make({0.5, 1.5, -0.5}, kFloat32), y),
                       doctest::Contains("in [0, 1], got values in [-0.5, 1.5]"), Error);
  CHECK_THROWS_WITH_AS(F::binary_cross_entropy(make({0.5, kNaN, 0.1}, kFloat32), y),
                       doctest::Contains("binary_cross_entropy: expected every element"), Error);
  CHECK_THROWS_WITH_AS(F::binary_cross_entropy(make({0.5, 0.5}, kFloat32), y),
                       doctest::Contains("expected target of the input's shape [2], got [3]"), Error);
  CHECK_THROWS_WITH_AS(F::binary_cross_entropy(make({0.5, 0.5, 0.5}, kFloat32), y, ones({2})),
                       doctest::Contains("binary_cross_entropy: shapes [2] and [3] cannot be broadcast"),
                       Error);
  CHECK_THROWS_WITH_AS(
      F::binary_cross_entropy(make({0.5, 0.5, 0.5}, kFloat32), y, ones({2, 3})),
      doctest::Contains("weight of shape [2, 3] does not broadcast to the input's shape [3]"), Error);
  CHECK(F::binary_cross_entropy(zeros({0}), zeros({0}), {}, Reduction::Sum).item<double>() == 0.0);
}

// ---- activation modules ------------------------------------------------------------------------

TEST_CASE("activation modules call their ops and print as torch") {
  Tensor x = pat({7}, 50.0, 3.0);
  check_close(nn::LeakyReLU(0.2)(x), values(leaky_relu(x, 0.2)));
  check_close(nn::ELU(0.5)(x), values(elu(x, 0.5)));
  check_close(nn::SELU()(x), values(selu(x)));
  check_close(nn::CELU(2.0)(x), values(celu(x, 2.0)));
  check_close(nn::Softplus(2.0, 5.0)(x), values(softplus(x, 2.0, 5.0)));
  check_close(nn::Hardtanh(-0.5, 2.0)(x), values(hardtanh(x, -0.5, 2.0)));
  check_close(nn::ReLU6()(x), values(relu6(x)));
  check_close(nn::Hardsigmoid()(x), values(hardsigmoid(x)));
  check_close(nn::Hardswish()(x), values(hardswish(x)));
  check_close(nn::Mish()(x), values(mish(x)));
  check_close(nn::LogSigmoid()(x), values(log_sigmoid(x)));
  check_close(nn::Softsign()(x), values(softsign(x)));
  CHECK(nn::LeakyReLU().extra_repr() == "negative_slope=0.01");
  CHECK(nn::ELU().extra_repr() == "alpha=1.0");
  CHECK(nn::CELU(0.5).extra_repr() == "alpha=0.5");
  CHECK(nn::Softplus().extra_repr() == "beta=1.0, threshold=20.0");
  CHECK(nn::Hardtanh().extra_repr() == "min_val=-1.0, max_val=1.0");
  CHECK_THROWS_WITH_AS(nn::CELU(0.0), doctest::Contains("CELU: alpha must not be 0"), Error);
  CHECK_THROWS_WITH_AS(nn::Softplus(0.0), doctest::Contains("Softplus: beta must not be 0"), Error);
  CHECK_THROWS_WITH_AS(nn::Hardtanh(1.0, -1.0), doctest::Contains("Hardtanh: min_val (1)"), Error);
}

TEST_CASE("PReLU learns one slope, or one per channel, initialised to 0.25") {
  nn::PReLU shared;
  CHECK(values(shared.weight) == std::vector<double>{0.25});
  CHECK(shared.extra_repr() == "num_parameters=1");
  nn::PReLU per_channel(3, 0.1);
  CHECK(per_channel.extra_repr() == "num_parameters=3");
  Tensor x = make({-2.0, 1.0, -1.0, -4.0, 2.0, -3.0}, {2, 3}, kFloat32);
  check_close(shared(x), {-0.5, 1.0, -0.25, -1.0, 2.0, -0.75});
  Tensor y = per_channel(x);
  check_close(y, {-0.2, 1.0, -0.1, -0.4, 2.0, -0.3});
  y.sum().backward();
  check_close(per_channel.weight.grad(), {-6.0, 0.0, -4.0});
  CHECK_THROWS_WITH_AS(nn::PReLU(0), doctest::Contains("PReLU: expected num_parameters >= 1, got 0"), Error);
  CHECK_THROWS_WITH_AS(per_channel(zeros({2, 4})),
                       doctest::Contains("prelu: expected a weight of 1 element or one per channel (4"),
                       Error);
}
