/*
 * report.html writer (see report.h): parse the run's two files, then draw each chart as inline
 * SVG. Everything a viewer needs is in the one file.
 */
#include "tools/train/report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "nn/serialize/atomic_file.h"

namespace loom::train {
namespace {

using nlohmann::json;

struct Point {
  double x, y;
};

struct Series {
  std::string name;
  std::string color;
  std::vector<Point> points;
  bool markers = false;  // few points (one per epoch): draw a dot on each
  double width = 1.5;
  double opacity = 1.0;
};

struct ChartOptions {
  // Start the y axis at 0: for rates (throughput, learning rate) a y range around the mean
  // would blow small fluctuations up into dramatic swings.
  bool y_from_zero = false;
  // x counts whole things (epochs): ticks at integers only.
  bool x_integer = false;
};

struct Metrics {
  std::vector<Point> loss, lr, throughput;  // x = step
  std::vector<Point> val_loss, val_acc;     // x = epoch; accuracy in percent
  std::string throughput_unit = "samples/s";
  size_t train_lines = 0, val_lines = 0;
  double last_step = 0, last_epoch = 0, last_time_s = -1;
  std::vector<std::string> notes;  // what was skipped, shown on the page
};

// The 1-based line of byte offset `pos` in `text` (for JSON parse errors in config.json).
size_t line_of(const std::string& text, size_t pos) {
  pos = std::min(pos, text.size());
  return 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(pos), '\n'));
}

json read_config(const std::filesystem::path& path) {
  LOOM_CHECK(std::filesystem::exists(path), "report: ", path.string(),
             " is missing; pass the run directory that train wrote (it holds config.json and metrics.jsonl)");
  std::string text = nn::read_file(path);
  json config;
  try {
    config = json::parse(text);
  } catch (const json::parse_error& e) {
    LOOM_FAIL("report: ", path.string(), ":", line_of(text, e.byte == 0 ? 0 : e.byte - 1),
              ": not valid JSON (", e.what(), "); config.json must hold one JSON object");
  }
  LOOM_CHECK(config.is_object(), "report: ", path.string(), ":1: expected one JSON object, found a ",
             config.type_name());
  return config;
}

// A number field that may be null (NaN written by a JSON writer) or missing. Returns false if
// missing; sets `value` to NaN for null.
bool number_field(const json& line, const char* key, const std::filesystem::path& path, size_t lineno,
                  double& value) {
  auto it = line.find(key);
  if (it == line.end()) return false;
  if (it->is_null()) {
    value = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  // Some writers put "NaN"/"inf" in strings; treat them as the non-finite numbers they name.
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    if (s == "NaN" || s == "nan" || s == "inf" || s == "-inf" || s == "Infinity" || s == "-Infinity") {
      value = std::numeric_limits<double>::quiet_NaN();
      return true;
    }
  }
  LOOM_CHECK(it->is_number(), "report: ", path.string(), ":", lineno, ": \"", key,
             "\" should be a number, found ", it->dump());
  value = it->get<double>();
  return true;
}

double required(const json& line, const char* key, const std::filesystem::path& path, size_t lineno) {
  double v = 0;
  LOOM_CHECK(number_field(line, key, path, lineno, v), "report: ", path.string(), ":", lineno,
             ": missing field \"", key, "\" in a \"", line.value("kind", std::string("?")), "\" line");
  return v;
}

// Appends (x, y) if both are finite; counts the rest so that the page can say what was dropped.
void add_point(std::vector<Point>& series, double x, double y, size_t& skipped) {
  if (std::isfinite(x) && std::isfinite(y))
    series.push_back({x, y});
  else
    ++skipped;
}

Metrics read_metrics(const std::filesystem::path& path) {
  LOOM_CHECK(std::filesystem::exists(path), "report: ", path.string(),
             " is missing; pass the run directory that train wrote (it holds config.json and metrics.jsonl)");
  const std::string text = nn::read_file(path);
  Metrics m;
  size_t skipped_loss = 0, skipped_lr = 0, skipped_tp = 0, skipped_val_loss = 0, skipped_val_acc = 0;
  bool unit_seen = false;
  size_t lineno = 0, pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    const bool last_unterminated = nl == std::string::npos;
    std::string line_text = text.substr(pos, last_unterminated ? std::string::npos : nl - pos);
    pos = last_unterminated ? text.size() : nl + 1;
    ++lineno;
    if (line_text.find_first_not_of(" \t\r") == std::string::npos) continue;
    json line;
    try {
      line = json::parse(line_text);
    } catch (const json::parse_error& e) {
      // A run killed while appending leaves a last line without its newline: keep the rest.
      if (last_unterminated) {
        m.notes.push_back("line " + std::to_string(lineno) + " of metrics.jsonl is truncated (the run " +
                          "was probably interrupted while writing it) and was skipped");
        break;
      }
      LOOM_FAIL("report: ", path.string(), ":", lineno, ": not valid JSON (", e.what(),
                "); each line must be one JSON object");
    }
    LOOM_CHECK(line.is_object(), "report: ", path.string(), ":", lineno, ": expected a JSON object, found ",
               line.type_name());
    auto kind_it = line.find("kind");
    LOOM_CHECK(kind_it != line.end() && kind_it->is_string(), "report: ", path.string(), ":", lineno,
               ": missing string field \"kind\" (\"train\" or \"val\")");
    const std::string kind = kind_it->get<std::string>();
    if (kind == "train") {
      ++m.train_lines;
      double step = required(line, "step", path, lineno);
      double loss = required(line, "loss", path, lineno);
      add_point(m.loss, step, loss, skipped_loss);
      double v;
      if (number_field(line, "lr", path, lineno, v)) add_point(m.lr, step, v, skipped_lr);
      if (number_field(line, "throughput", path, lineno, v)) add_point(m.throughput, step, v, skipped_tp);
      if (number_field(line, "epoch", path, lineno, v) && std::isfinite(v)) m.last_epoch = std::max(m.last_epoch, v);
      if (number_field(line, "time_s", path, lineno, v) && std::isfinite(v)) m.last_time_s = std::max(m.last_time_s, v);
      if (std::isfinite(step)) m.last_step = std::max(m.last_step, step);
      auto unit = line.find("throughput_unit");
      if (!unit_seen && unit != line.end() && unit->is_string()) {
        m.throughput_unit = unit->get<std::string>();
        unit_seen = true;
      }
    } else if (kind == "val") {
      ++m.val_lines;
      double epoch = required(line, "epoch", path, lineno);
      double v;
      if (number_field(line, "val_loss", path, lineno, v)) add_point(m.val_loss, epoch, v, skipped_val_loss);
      if (number_field(line, "val_accuracy", path, lineno, v)) add_point(m.val_acc, epoch, 100.0 * v, skipped_val_acc);
      if (std::isfinite(epoch)) m.last_epoch = std::max(m.last_epoch, epoch);
    }
    // Other kinds are ignored: a newer trainer may log more, and an older report still works.
  }
  auto note = [&](size_t n, const char* what) {
    if (n > 0)
      m.notes.push_back(std::to_string(n) + " non-finite " + what + " value" + (n == 1 ? " was" : "s were") +
                        " left out of the charts");
  };
  note(skipped_loss, "training loss");
  note(skipped_lr, "learning rate");
  note(skipped_tp, "throughput");
  note(skipped_val_loss, "validation loss");
  note(skipped_val_acc, "validation accuracy");
  return m;
}

// TensorBoard's smoothing: an exponential moving average, debiased so that the first points are
// not pulled towards 0. The weight grows with the series so that the window stays ~5% of it.
std::vector<Point> smooth(const std::vector<Point>& raw) {
  std::vector<Point> out;
  if (raw.size() < 3) return out;
  const double w = std::max(0.0, 1.0 - 20.0 / static_cast<double>(raw.size()));
  double ema = 0, norm = 0;
  for (const Point& p : raw) {
    ema = w * ema + (1 - w) * p.y;
    norm = w * norm + (1 - w);
    out.push_back({p.x, ema / norm});
  }
  return out;
}

std::string fmt(double v, int precision = 6) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", precision, v);
  return buf;
}

// Fixed decimals, for values whose scale is known (percentages, throughput).
std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string coord(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// One line chart: axes with nice ticks, a light grid, axis labels, a legend, a polyline per
// non-empty series (class "series", data-series = its name, one x,y pair per point).
std::string svg_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                      const std::vector<Series>& series, ChartOptions options = {}) {
  constexpr double kW = 560, kH = 310, kLeft = 70, kRight = 16, kTop = 46, kBottom = 48;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << kW << " " << kH << "\" width=\"" << kW
    << "\" height=\"" << kH << "\" role=\"img\" aria-label=\"" << html_escape(title) << "\">\n";
  s << "<text class=\"title\" x=\"" << kW / 2 << "\" y=\"20\" text-anchor=\"middle\">" << html_escape(title)
    << "</text>\n";

  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const Series& se : series)
    for (const Point& p : se.points) {
      x0 = std::min(x0, p.x), x1 = std::max(x1, p.x);
      y0 = std::min(y0, p.y), y1 = std::max(y1, p.y);
    }
  if (!std::isfinite(x0)) {
    s << "<rect class=\"frame\" x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << pw << "\" height=\"" << ph
      << "\"/>\n<text class=\"empty\" x=\"" << kLeft + pw / 2 << "\" y=\"" << kTop + ph / 2
      << "\" text-anchor=\"middle\">no data recorded</text>\n</svg>\n";
    return s.str();
  }
  if (options.y_from_zero) y0 = std::min(y0, 0.0), y1 = std::max(y1, 0.0);
  const NiceAxis xa = nice_axis(x0, x1, 6, options.x_integer ? 1.0 : 0.0), ya = nice_axis(y0, y1, 5);
  auto X = [&](double x) { return kLeft + (x - xa.lo) / (xa.hi - xa.lo) * pw; };
  auto Y = [&](double y) { return kTop + ph - (y - ya.lo) / (ya.hi - ya.lo) * ph; };

  // Grid and tick labels.
  for (double t : ya.ticks) {
    s << "<line class=\"grid\" x1=\"" << kLeft << "\" x2=\"" << kLeft + pw << "\" y1=\"" << coord(Y(t)) << "\" y2=\""
      << coord(Y(t)) << "\"/>";
    s << "<text class=\"tick ytick\" x=\"" << kLeft - 6 << "\" y=\"" << coord(Y(t) + 4) << "\" text-anchor=\"end\">"
      << format_tick(t, ya.step) << "</text>\n";
  }
  for (double t : xa.ticks) {
    s << "<line class=\"grid\" y1=\"" << kTop << "\" y2=\"" << kTop + ph << "\" x1=\"" << coord(X(t)) << "\" x2=\""
      << coord(X(t)) << "\"/>";
    s << "<text class=\"tick xtick\" x=\"" << coord(X(t)) << "\" y=\"" << kTop + ph + 16
      << "\" text-anchor=\"middle\">" << format_tick(t, xa.step) << "</text>\n";
  }
  s << "<rect class=\"frame\" x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << pw << "\" height=\"" << ph
    << "\"/>\n";
  s << "<text class=\"label\" x=\"" << kLeft + pw / 2 << "\" y=\"" << kH - 8 << "\" text-anchor=\"middle\">"
    << html_escape(x_label) << "</text>\n";
  s << "<text class=\"label\" transform=\"translate(16 " << kTop + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
    << html_escape(y_label) << "</text>\n";

  // Series, and the legend in one row above the plot (inside it, it would hide data).
  double legend_x = kLeft;
  const double legend_y = kTop - 8;
  for (const Series& se : series) {
    if (se.points.empty()) continue;
    s << "<polyline class=\"series\" data-series=\"" << html_escape(se.name) << "\" fill=\"none\" stroke=\"" << se.color
      << "\" stroke-width=\"" << se.width << "\" stroke-opacity=\"" << se.opacity
      << "\" stroke-linejoin=\"round\" points=\"";
    for (size_t i = 0; i < se.points.size(); ++i)
      s << (i ? " " : "") << coord(X(se.points[i].x)) << "," << coord(Y(se.points[i].y));
    s << "\"/>\n";
    // A lone point draws no line: always mark it.
    if (se.markers || se.points.size() == 1)
      for (const Point& p : se.points)
        s << "<circle class=\"marker\" cx=\"" << coord(X(p.x)) << "\" cy=\"" << coord(Y(p.y)) << "\" r=\"3\" fill=\""
          << se.color << "\"><title>" << html_escape(se.name) << ": " << fmt(p.y) << " at " << fmt(p.x)
          << "</title></circle>\n";
    s << "<line x1=\"" << legend_x << "\" x2=\"" << legend_x + 20 << "\" y1=\"" << legend_y - 4 << "\" y2=\""
      << legend_y - 4 << "\" stroke=\"" << se.color << "\" stroke-width=\"" << std::max(se.width, 2.0)
      << "\" stroke-opacity=\"" << se.opacity << "\"/>";
    s << "<text class=\"legend\" x=\"" << legend_x + 25 << "\" y=\"" << legend_y << "\">" << html_escape(se.name)
      << "</text>\n";
    legend_x += 40 + 6.5 * static_cast<double>(se.name.size());  // ~6.5 px per 11 px character
  }
  s << "</svg>\n";
  return s.str();
}

std::string config_value(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::string utc_now() {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

std::string duration(double seconds) {
  char buf[48];
  if (seconds < 60)
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  else if (seconds < 3600)
    std::snprintf(buf, sizeof buf, "%d min %02d s", static_cast<int>(seconds) / 60, static_cast<int>(seconds) % 60);
  else
    std::snprintf(buf, sizeof buf, "%d h %02d min", static_cast<int>(seconds) / 3600,
                  (static_cast<int>(seconds) % 3600) / 60);
  return buf;
}

constexpr const char* kCss = R"(body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1180px;color:#222;padding:0 16px}
h1{font-size:1.5em;margin-bottom:4px}h2{font-size:1.15em;margin-top:28px}.sub{color:#666;margin-top:0}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ddd;padding:3px 10px;text-align:left}
th{background:#f5f5f5}td.v{font-family:ui-monospace,monospace}.charts{display:flex;flex-wrap:wrap;gap:12px}
.notes{background:#fff8e1;border:1px solid #f0d98c;padding:8px 14px}
svg{background:#fff;font-size:11px;max-width:100%;height:auto}svg .title{font-size:14px;font-weight:600}
svg .grid{stroke:#e6e6e6;stroke-width:1}svg .frame{fill:none;stroke:#999}svg .tick{fill:#555}
svg .label{fill:#333;font-size:12px}svg .legend{fill:#333}svg .empty{fill:#999;font-size:13px})";

}  // namespace

NiceAxis nice_axis(double lo, double hi, int target, double min_step) {
  LOOM_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "nice_axis: need finite lo <= hi, got ", lo, ", ",
             hi);
  target = std::max(target, 1);
  if (hi == lo) {  // one value: a range around it that still shows it in the middle
    double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad, hi += pad;
  }
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 5.0})
    if (m * mag >= raw * (1 - 1e-9)) {
      step = m * mag;
      break;
    }
  if (min_step > 0 && step < min_step) step = min_step;
  NiceAxis a;
  a.step = step;
  a.lo = std::floor(lo / step + 1e-9) * step;
  a.hi = std::ceil(hi / step - 1e-9) * step;
  if (a.hi <= a.lo) a.hi = a.lo + step;
  const long n = std::lround((a.hi - a.lo) / step);
  for (long i = 0; i <= n; ++i) {
    double t = a.lo + static_cast<double>(i) * step;
    if (std::abs(t) < step * 1e-9) t = 0;  // no "-0" or "1e-17" at the origin
    a.ticks.push_back(t);
  }
  return a;
}

std::string format_tick(double value, double step) {
  char buf[48];
  const double big = std::max(std::abs(value), step);
  if (step < 1e-3 || big >= 1e7) {
    // Scientific, with as many significant digits as the step needs relative to the value.
    int digits = std::max(0, static_cast<int>(std::floor(std::log10(big))) -
                                 static_cast<int>(std::floor(std::log10(step) + 1e-9)));
    std::snprintf(buf, sizeof buf, "%.*e", std::min(digits, 6), value);
    // Compact the exponent as people write it: "1.0e-5", "2.0e8".
    std::string s = buf;
    size_t e = s.find('e') + 1;
    if (s[e] == '+') s.erase(e, 1);
    if (s[e] == '-') ++e;
    while (e + 1 < s.size() && s[e] == '0') s.erase(e, 1);
    return s;
  }
  int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// The "Quantization" section from quantization.json: the f32 / INT8 comparison and a table of
// every INT8 layer's scales (input, weight range over its channels, output). Fields that are
// missing are shown as "-": the file is informative, not a contract.
std::string quantization_section(const json& q) {
  std::ostringstream h;
  auto num = [](const json& obj, const char* key, int precision = 4) {
    return obj.contains(key) && obj[key].is_number() ? fmt(obj[key].get<double>(), precision) : std::string("-");
  };
  auto str = [](const json& obj, const char* key) {
    return obj.contains(key) ? config_value(obj[key]) : std::string("-");
  };
  h << "<h2>Quantization</h2>\n<p class=\"sub\">" << html_escape(str(q, "out")) << ": "
    << html_escape(str(q, "method")) << " calibration, "
    << (q.value("per_channel", false) ? "per-channel" : "per-tensor") << " weights, " << html_escape(str(q, "bits"))
    << " bits; " << html_escape(str(q, "calibration_batches")) << " batches in "
    << html_escape(num(q, "calibration_seconds", 3)) << " s</p>\n";
  h << "<table>\n<tr><th></th><th>test accuracy</th><th>model file</th><th>latency, batch 1</th><th>latency, batch "
    << html_escape(str(q, "batch")) << "</th></tr>\n";
  for (const auto& [key, label] : {std::pair{"f32", "f32"}, std::pair{"ptq", "INT8 (PTQ)"}, std::pair{"qat", "INT8 (QAT)"}}) {
    if (!q.contains(key) || !q[key].is_object()) continue;
    const json& r = q[key];
    const std::string acc = r.contains("accuracy") && r["accuracy"].is_number()
                                ? fixed(100 * r["accuracy"].get<double>(), 2) + " %"
                                : "-";
    const std::string kb = r.contains("file_bytes") && r["file_bytes"].is_number()
                               ? fixed(r["file_bytes"].get<double>() / 1024, 1) + " KB"
                               : "-";
    h << "<tr><th>" << label << "</th><td class=\"v\">" << acc << "</td><td class=\"v\">" << kb
      << "</td><td class=\"v\">" << num(r, "latency_b1_ms") << " ms</td><td class=\"v\">"
      << num(r, "latency_batch_ms") << " ms</td></tr>\n";
  }
  h << "</table>\n";
  if (q.contains("layers") && q["layers"].is_array()) {
    h << "<h3>INT8 layers</h3>\n<table>\n<tr><th>layer</th><th>from</th><th>weight</th><th>input scale / zero "
         "point</th><th>weight scales (min - max)</th><th>output scale / zero point</th></tr>\n";
    for (const json& l : q["layers"]) {
      const std::string output = l.contains("output_scale") ? num(l, "output_scale") + " / " + str(l, "output_zero_point")
                                                            : std::string("f32 (dequantized)");
      h << "<tr><td>" << html_escape(str(l, "kind")) << (l.value("relu", false) ? " + relu" : "") << "</td><td>"
        << html_escape(str(l, "source")) << "</td><td class=\"v\">" << html_escape(str(l, "weight_shape"))
        << "</td><td class=\"v\">" << num(l, "input_scale") << " / " << html_escape(str(l, "input_zero_point"))
        << "</td><td class=\"v\">" << num(l, "weight_scale_min") << " - " << num(l, "weight_scale_max") << " ("
        << html_escape(str(l, "weight_scales")) << ")</td><td class=\"v\">" << html_escape(output)
        << "</td></tr>\n";
    }
    h << "</table>\n";
  }
  return h.str();
}

void write_report(const std::filesystem::path& run_dir) {
  LOOM_CHECK(std::filesystem::is_directory(run_dir), "report: run directory ", run_dir.string(),
             " does not exist; pass the directory that train wrote");
  const json config = read_config(run_dir / "config.json");
  const Metrics m = read_metrics(run_dir / "metrics.jsonl");

  const std::string model = config.contains("model") ? config_value(config["model"]) : "model";
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Loom training report: "
    << html_escape(model) << "</title>\n<style>\n" << kCss << "\n</style>\n</head>\n<body>\n";
  h << "<h1>Training report: " << html_escape(model) << "</h1>\n";
  h << "<p class=\"sub\">Generated " << utc_now() << " from " << html_escape(run_dir.string()) << "</p>\n";

  // Summary: the numbers people look for first.
  h << "<h2>Summary</h2>\n<table>\n";
  auto row = [&](const std::string& k, const std::string& v) {
    h << "<tr><th>" << html_escape(k) << "</th><td class=\"v\">" << html_escape(v) << "</td></tr>\n";
  };
  row("steps", fmt(m.last_step, 12));
  row("epochs", fmt(m.last_epoch, 4));
  if (m.last_time_s >= 0) row("training time", duration(m.last_time_s));
  if (!m.loss.empty()) row("last training loss", fmt(m.loss.back().y, 5));
  if (!m.val_loss.empty()) {
    auto best = std::min_element(m.val_loss.begin(), m.val_loss.end(), [](auto& a, auto& b) { return a.y < b.y; });
    row("best validation loss", fmt(best->y, 5) + " (epoch " + fmt(best->x) + ")");
  }
  if (!m.val_acc.empty()) {
    auto best = std::max_element(m.val_acc.begin(), m.val_acc.end(), [](auto& a, auto& b) { return a.y < b.y; });
    row("best validation accuracy", fixed(best->y, 2) + " % (epoch " + fmt(best->x) + ")");
  }
  if (!m.throughput.empty()) {
    double sum = 0;
    for (const Point& p : m.throughput) sum += p.y;
    const double mean = sum / static_cast<double>(m.throughput.size());
    row("mean throughput", (mean >= 100 ? fixed(mean, 0) : fmt(mean, 4)) + " " + m.throughput_unit);
  }
  h << "</table>\n";

  if (!m.notes.empty()) {
    h << "<div class=\"notes\"><strong>Notes</strong><ul>\n";
    for (const std::string& n : m.notes) h << "<li>" << html_escape(n) << "</li>\n";
    h << "</ul></div>\n";
  }

  h << "<h2>Curves</h2>\n<div class=\"charts\">\n";
  std::vector<Series> loss_series = {{"training loss", "#1f77b4", m.loss, false, 1.2, 0.45}};
  if (auto sm = smooth(m.loss); !sm.empty()) loss_series.push_back({"smoothed (EMA)", "#1f77b4", sm, false, 2.2, 1.0});
  h << svg_chart("Training loss", "step", "loss", loss_series);
  if (m.val_lines == 0) {
    h << svg_chart("Validation loss", "epoch", "loss", {});
    h << svg_chart("Validation accuracy", "epoch", "accuracy (%)", {});
  } else {
    h << svg_chart("Validation loss", "epoch", "loss", {{"validation loss", "#d62728", m.val_loss, true}},
                   {.x_integer = true});
    h << svg_chart("Validation accuracy", "epoch", "accuracy (%)",
                   {{"validation accuracy", "#2ca02c", m.val_acc, true}}, {.x_integer = true});
  }
  h << svg_chart("Throughput", "step", "throughput (" + m.throughput_unit + ")",
                 {{"throughput", "#9467bd", m.throughput}}, {.y_from_zero = true});
  h << svg_chart("Learning rate", "step", "learning rate", {{"learning rate", "#ff7f0e", m.lr}}, {.y_from_zero = true});
  h << "</div>\n";

  if (const auto quant_file = run_dir / kQuantizationFile; std::filesystem::exists(quant_file)) {
    std::ifstream in(quant_file);
    const json q = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (q.is_object())
      h << quantization_section(q);
    else
      h << "<div class=\"notes\">" << html_escape(quant_file.string()) << " is not valid JSON; skipped</div>\n";
  }

  h << "<h2>Configuration</h2>\n<table>\n<tr><th>option</th><th>value</th></tr>\n";
  for (const auto& [key, value] : config.items())
    h << "<tr><td>" << html_escape(key) << "</td><td class=\"v\">" << html_escape(config_value(value))
      << "</td></tr>\n";
  h << "</table>\n</body>\n</html>\n";

  nn::write_file_atomically(run_dir / "report.html", h.str());
}

}  // namespace loom::train
