#include "model/vocab/json_reader.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

namespace fsdpsim {

const JsonValue* JsonValue::find(const std::string& key) const {
  if (kind != Kind::Object) return nullptr;
  for (const auto& m : members)
    if (m.first == key) return &m.second;
  return nullptr;
}

const char* json_kind_name(JsonValue::Kind k) {
  switch (k) {
    case JsonValue::Kind::Null: return "null";
    case JsonValue::Kind::Bool: return "bool";
    case JsonValue::Kind::Number: return "number";
    case JsonValue::Kind::String: return "string";
    case JsonValue::Kind::Array: return "array";
    case JsonValue::Kind::Object: return "object";
  }
  return "?";
}

namespace {

constexpr int kMaxDepth = 64;

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}

  bool document(JsonValue* out) {
    ws();
    if (!value(out, 0)) return false;
    ws();
    if (p_ != s_.size()) return fail("end of input after the value");
    return true;
  }
  std::string error() const { return fmt::format("offset {}: expected {}", err_at_, err_); }

 private:
  bool fail(const std::string& what) {
    if (err_.empty()) err_ = what, err_at_ = p_;
    return false;
  }
  void ws() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\n' || s_[p_] == '\r')) ++p_;
  }
  bool literal(const char* word) {
    size_t n = 0;
    while (word[n]) ++n;
    if (s_.compare(p_, n, word) != 0) return fail(std::string("'") + word + "'");
    p_ += n;
    return true;
  }

  bool value(JsonValue* v, int depth) {
    if (depth > kMaxDepth) return fail("less nesting (more than 64 levels)");
    if (p_ >= s_.size()) return fail("a value");
    char c = s_[p_];
    if (c == '{') return object(v, depth);
    if (c == '[') return array(v, depth);
    if (c == '"') {
      v->kind = JsonValue::Kind::String;
      return string(&v->text);
    }
    if (c == 't' || c == 'f') {
      v->kind = JsonValue::Kind::Bool;
      v->boolean = c == 't';
      return literal(c == 't' ? "true" : "false");
    }
    if (c == 'n') {
      v->kind = JsonValue::Kind::Null;
      return literal("null");
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number(v);
    return fail("a value");
  }

  bool object(JsonValue* v, int depth) {
    v->kind = JsonValue::Kind::Object;
    ++p_;
    ws();
    if (p_ < s_.size() && s_[p_] == '}') return ++p_, true;
    for (;;) {
      ws();
      if (p_ >= s_.size() || s_[p_] != '"') return fail("a string key");
      std::string key;
      if (!string(&key)) return false;
      ws();
      if (p_ >= s_.size() || s_[p_] != ':') return fail("':'");
      ++p_;
      ws();
      v->members.emplace_back(std::move(key), JsonValue{});
      if (!value(&v->members.back().second, depth + 1)) return false;
      ws();
      if (p_ < s_.size() && s_[p_] == ',') {
        ++p_;
        continue;
      }
      if (p_ < s_.size() && s_[p_] == '}') return ++p_, true;
      return fail("',' or '}'");
    }
  }

  bool array(JsonValue* v, int depth) {
    v->kind = JsonValue::Kind::Array;
    ++p_;
    ws();
    if (p_ < s_.size() && s_[p_] == ']') return ++p_, true;
    for (;;) {
      ws();
      v->items.emplace_back();
      if (!value(&v->items.back(), depth + 1)) return false;
      ws();
      if (p_ < s_.size() && s_[p_] == ',') {
        ++p_;
        continue;
      }
      if (p_ < s_.size() && s_[p_] == ']') return ++p_, true;
      return fail("',' or ']'");
    }
  }

  bool hex4(unsigned* out) {
    if (p_ + 4 > s_.size()) return fail("4 hex digits after \\u");
    unsigned x = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[p_ + i];
      unsigned d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99;
      if (d > 15) return fail("4 hex digits after \\u");
      x = x * 16 + d;
    }
    p_ += 4;
    *out = x;
    return true;
  }

  static void utf8(std::string* out, unsigned cp) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  bool string(std::string* out) {
    ++p_;  // the opening quote
    for (;;) {
      if (p_ >= s_.size()) return fail("'\"' closing the string");
      char c = s_[p_];
      if (c == '"') return ++p_, true;
      if (static_cast<unsigned char>(c) < 0x20) return fail("no control character inside a string");
      if (c != '\\') {
        *out += c;
        ++p_;
        continue;
      }
      if (++p_ >= s_.size()) return fail("an escape after '\\'");
      char e = s_[p_++];
      switch (e) {
        case '"': *out += '"'; break;
        case '\\': *out += '\\'; break;
        case '/': *out += '/'; break;
        case 'b': *out += '\b'; break;
        case 'f': *out += '\f'; break;
        case 'n': *out += '\n'; break;
        case 'r': *out += '\r'; break;
        case 't': *out += '\t'; break;
        case 'u': {
          unsigned cp = 0;
          if (!hex4(&cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {
            unsigned lo = 0;
            if (s_.compare(p_, 2, "\\u") != 0) return fail("a low surrogate \\uDC00..\\uDFFF");
            p_ += 2;
            if (!hex4(&lo)) return false;
            if (lo < 0xDC00 || lo > 0xDFFF) return fail("a low surrogate \\uDC00..\\uDFFF");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return fail("no lone low surrogate");
          }
          utf8(out, cp);
          break;
        }
        default: --p_; return fail("one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX");
      }
    }
  }

  bool number(JsonValue* v) {
    size_t start = p_;
    bool integral = true;
    if (s_[p_] == '-') ++p_;
    auto digits = [&] {
      size_t d = p_;
      while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') ++p_;
      return p_ - d;
    };
    if (p_ < s_.size() && s_[p_] == '0') ++p_;
    else if (!digits()) return fail("a digit");
    if (p_ < s_.size() && s_[p_] == '.') {
      ++p_, integral = false;
      if (!digits()) return fail("a digit after '.'");
    }
    if (p_ < s_.size() && (s_[p_] == 'e' || s_[p_] == 'E')) {
      ++p_, integral = false;
      if (p_ < s_.size() && (s_[p_] == '+' || s_[p_] == '-')) ++p_;
      if (!digits()) return fail("a digit in the exponent");
    }
    std::string t = s_.substr(start, p_ - start);
    v->kind = JsonValue::Kind::Number;
    v->number = std::strtod(t.c_str(), nullptr);
    if (integral && t.size() - (t[0] == '-') <= 18) {  // up to 18 digits always fit in int64
      v->integral = true;
      v->integer = std::strtoll(t.c_str(), nullptr, 10);
    }
    return true;
  }

  const std::string& s_;
  size_t p_ = 0;
  std::string err_;
  size_t err_at_ = 0;
};

}  // namespace

bool parse_json(const std::string& text, JsonValue* out, std::string* error) {
  Reader r(text);
  *out = JsonValue{};
  if (r.document(out)) return true;
  if (error) *error = r.error();
  return false;
}

}  // namespace fsdpsim
