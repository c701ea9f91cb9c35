/* The KJV corpus and character tokenization (see text_corpus.h). */
#include "data/text_corpus.h"

#include <sys/wait.h>

#include <cctype>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>

#include "core/error.h"

namespace loom::data {

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// "  12 text" -> the text; otherwise npos.
size_t verse_text_start(const std::string& line) {
  size_t i = line.find_first_not_of(' ');
  if (i == 0 || i == std::string::npos || !std::isdigit(static_cast<unsigned char>(line[i])))
    return std::string::npos;
  while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
  if (i >= line.size() || line[i] != ' ') return std::string::npos;
  return line.find_first_not_of(' ', i);
}

// Length of the UTF-8 sequence starting with byte c, 0 if c cannot start one.
int utf8_length(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c >> 5) == 0x6) return 2;
  if ((c >> 4) == 0xE) return 3;
  if ((c >> 3) == 0x1E) return 4;
  return 0;
}

}  // namespace

std::string strip_verse_references(const std::string& bible_output) {
  // bible(1) prints: a blank line, a heading at column 0 ("Genesis 1"), a blank line, then
  // verses "  N text" whose wrapped continuations start at column 0 (never after a blank).
  std::istringstream in(bible_output);
  std::string line, verse, out;
  bool after_blank = true;
  auto flush = [&] {
    if (!verse.empty()) out += verse + "\n";
    verse.clear();
  };
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(' ') == std::string::npos) {
      flush();
      after_blank = true;
      continue;
    }
    const size_t text = verse_text_start(line);
    if (text != std::string::npos) {
      flush();
      verse = line.substr(text);
    } else if (!after_blank) {
      verse += ' ';
      verse.append(line, line.find_first_not_of(' '));
    }  // else: a chapter heading
    after_blank = false;
  }
  flush();
  return out;
}

std::string kjv_text(const std::string& bible, const std::string& data_dir) {
  // -l100000: one line per verse, no wrapping to the terminal's width. Its stderr is left
  // alone (it shows on the terminal) so that no message can end up in the corpus.
  const std::string cmd = shell_quote(bible) + " -p " + shell_quote(data_dir) + " -l100000 'Gen1:1-Rev22:21'";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  LOOM_CHECK(pipe != nullptr, "kjv_text: cannot run ", bible);
  std::string output;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe.get())) > 0) output.append(buffer, n);
  const int status = pclose(pipe.release());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  LOOM_CHECK(code == 0, "kjv_text: '", bible, "' failed (exit status ", code, ")",
             code == 127 ? ": not found; install Debian's bible-kjv (apt-get install bible-kjv)" : "");
  std::string text = strip_verse_references(output);
  LOOM_CHECK(text.size() > 1000000, "kjv_text: '", bible, "' printed only ", output.size(),
             " bytes; is bible-kjv-text installed in ", data_dir, "?");
  return text;
}

CharTokens tokenize_chars(const std::string& text, const std::string& what) {
  // First pass: the characters, as byte strings; std::map orders UTF-8 by code point.
  std::vector<std::pair<size_t, int>> chars;
  std::map<std::string, int32_t> ids;
  for (size_t i = 0; i < text.size();) {
    const int len = utf8_length(static_cast<unsigned char>(text[i]));
    LOOM_CHECK(len > 0 && i + static_cast<size_t>(len) <= text.size(), what, ": invalid UTF-8 at byte ", i);
    for (int k = 1; k < len; ++k)
      LOOM_CHECK((static_cast<unsigned char>(text[i + static_cast<size_t>(k)]) >> 6) == 0x2, what,
                 ": invalid UTF-8 at byte ", i);
    ids.emplace(text.substr(i, static_cast<size_t>(len)), 0);
    chars.emplace_back(i, len);
    i += static_cast<size_t>(len);
  }
  CharTokens out;
  for (auto& [c, id] : ids) {
    id = static_cast<int32_t>(out.vocab.size());
    out.vocab.push_back(c);
  }
  // Single bytes (all of an ASCII text) through a table: a map lookup per character would
  // dominate for a corpus of millions.
  int32_t ascii[128];
  for (int c = 0; c < 128; ++c) {
    auto it = ids.find(std::string(1, static_cast<char>(c)));
    ascii[c] = it == ids.end() ? -1 : it->second;
  }
  out.tokens.reserve(chars.size());
  for (auto [pos, len] : chars)
    out.tokens.push_back(len == 1 ? ascii[static_cast<unsigned char>(text[pos])]
                                  : ids[text.substr(pos, static_cast<size_t>(len))]);
  return out;
}

}  // namespace loom::data
