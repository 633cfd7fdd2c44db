// The `.seq` parser's lexer: one line split into tokens on blanks, brackets
// and braces keeping their contents together; every error names
// file:line:column. Used by seq_parser.cpp and seq_op_parser.cpp only.
#pragma once
#include <string>
#include <vector>

#include "model/vocab/source_error.hpp"

namespace fsdpsim::seq_lexer {

// '[' is a bracket, '{' a brace: an error names the one the user typed.
inline std::string bracket_name(char c) {
  return std::string(c == '[' || c == ']' ? "bracket '" : "brace '") + c + "'";
}

struct Token {
  std::string text;
  int column = 1;
};

class LineParser {
 public:
  LineParser(const std::string& file, int line_no, const std::string& line) : file_(file), line_no_(line_no) {
    lex(line);
  }
  bool done() const { return i_ >= toks_.size(); }
  const Token& peek() const { return toks_[i_]; }
  int end_column() const { return end_col_; }
  Token next(const char* expected) {
    if (done()) fail(end_col_, std::string("expected ") + expected + ", got end of line");
    return toks_[i_++];
  }
  [[noreturn]] void fail(int column, const std::string& what) const {
    throw SourceError(file_, {line_no_, column}, what);
  }
  [[noreturn]] void fail(const Token& t, const std::string& what) const { fail(t.column, what); }
  SourcePos pos(const Token& t) const { return {line_no_, t.column}; }

 private:
  void lex(const std::string& line) {
    size_t n = line.size(), p = 0;
    end_col_ = static_cast<int>(n) + 1;
    while (p < n) {
      char c = line[p];
      if (c == '#') {
        end_col_ = static_cast<int>(p) + 1;
        break;
      }
      if (c == ' ' || c == '\t' || c == '\r') {
        ++p;
        continue;
      }
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
        fail(static_cast<int>(p) + 1, "unexpected character (only printable ASCII is allowed)");
      Token t;
      t.column = static_cast<int>(p) + 1;
      std::string open;  // the unclosed '[' and '{', innermost last
      std::vector<int> open_col;
      while (p < n) {
        char d = line[p];
        if (d == '[' || d == '{') {
          open += d;
          open_col.push_back(static_cast<int>(p) + 1);
        }
        if (d == ']' || d == '}') {
          if (open.empty())
            fail(static_cast<int>(p) + 1, "closing " + bracket_name(d) + " without an opening " + (d == ']' ? "'['" : "'{'"));
          open.pop_back();
          open_col.pop_back();
        }
        const size_t depth = open.size();
        if (depth == 0 && (d == ' ' || d == '\t' || d == '#' || d == '\r')) break;
        if (static_cast<unsigned char>(d) < 0x20 || static_cast<unsigned char>(d) >= 0x7f)
          fail(static_cast<int>(p) + 1, "unexpected character (only printable ASCII is allowed)");
        if (depth > 0 && (d == ' ' || d == '\t')) {  // blanks inside a list are dropped
          ++p;
          continue;
        }
        t.text += d;
        ++p;
      }
      if (!open.empty())
        fail(open_col.back(), "unclosed " + bracket_name(open.back()) + " (close it with '" + (open.back() == '[' ? "]" : "}") +
                                  "' before the end of the line)");
      toks_.push_back(std::move(t));
    }
  }
  std::string file_;
  int line_no_;
  std::vector<Token> toks_;
  size_t i_ = 0;
  int end_col_ = 1;
};

}  // namespace fsdpsim::seq_lexer
