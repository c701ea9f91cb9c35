/*
 * Text corpora for character-level language models: the King James Bible from Debian's
 * bible-kjv (public domain), with the verse references stripped, and the character
 * vocabulary and tokens of any UTF-8 text.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::data {

// Converts the output of bible(1) into plain text: chapter headings dropped, verse numbers
// removed, wrapped lines joined; one verse per line.
std::string strip_verse_references(const std::string& bible_output);

// The whole King James Bible (Gen 1:1 to Rev 22:21) as plain text, by running `bible`
// (package bible-kjv; its text in `data_dir`, package bible-kjv-text). Throws loom::Error
// saying what to install when it cannot.
std::string kjv_text(const std::string& bible = "bible", const std::string& data_dir = "/usr/lib");

struct CharTokens {
  std::vector<std::string> vocab;  // the distinct characters (UTF-8), sorted by code point
  std::vector<int32_t> tokens;     // one per character: its position in vocab
};

// Splits UTF-8 text into characters. Throws loom::Error naming `what` and the byte offset of
// invalid UTF-8.
CharTokens tokenize_chars(const std::string& text, const std::string& what);

}  // namespace loom::data
