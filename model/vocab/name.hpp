// An interned name: a parameter, group, layer, adapter or owner name in an
// Observation. Every distinct text is stored once for the process (never
// freed), and a Name is a pointer to it, so copying one is a pointer copy and
// comparing two is a pointer compare: the model writes tens of names per
// observation and the spec checks compare them, millions of times in a hunt.
// The texts come from a bounded vocabulary (the scenario's layers, adapters and
// groups), so the table stays small.
#pragma once
#include <cstddef>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace fsdpsim {

class Name {
 public:
  Name() noexcept : s_(&empty_text()) {}
  // Interning: a hash lookup (per-thread cache in front of the process table).
  Name(std::string_view s) : s_(intern(s)) {}  // NOLINT: implicit, names are written from text everywhere
  Name(const std::string& s) : s_(intern(s)) {}  // NOLINT
  Name(const char* s) : s_(intern(std::string_view(s))) {}  // NOLINT

  const std::string& str() const noexcept { return *s_; }
  operator const std::string&() const noexcept { return *s_; }  // NOLINT: read as text where text is wanted
  const char* c_str() const noexcept { return s_->c_str(); }
  const char* data() const noexcept { return s_->data(); }
  size_t size() const noexcept { return s_->size(); }
  bool empty() const noexcept { return s_->empty(); }
  void clear() noexcept { s_ = &empty_text(); }

  // One text, one Name: equality is identity.
  friend bool operator==(Name a, Name b) noexcept { return a.s_ == b.s_; }
  friend bool operator!=(Name a, Name b) noexcept { return a.s_ != b.s_; }
  friend bool operator==(Name a, const std::string& b) { return *a.s_ == b; }
  friend bool operator==(const std::string& a, Name b) { return a == *b.s_; }
  friend bool operator!=(Name a, const std::string& b) { return *a.s_ != b; }
  friend bool operator!=(const std::string& a, Name b) { return a != *b.s_; }
  friend bool operator==(Name a, const char* b) { return *a.s_ == b; }
  friend bool operator!=(Name a, const char* b) { return *a.s_ != b; }
  // By text, never by address: sorted names print in the same order in every run.
  friend bool operator<(Name a, Name b) { return a.s_ != b.s_ && *a.s_ < *b.s_; }
  friend std::ostream& operator<<(std::ostream& os, Name n) { return os << *n.s_; }
  friend std::string operator+(const std::string& a, Name b) { return a + *b.s_; }
  friend std::string operator+(Name a, const std::string& b) { return *a.s_ + b; }
  friend std::string operator+(const char* a, Name b) { return a + *b.s_; }
  friend std::string operator+(Name a, const char* b) { return *a.s_ + b; }

  // The address identifies the text within this process (hashing, caches).
  const void* id() const noexcept { return s_; }

 private:
  static const std::string& empty_text() noexcept;
  static const std::string* intern(std::string_view s);
  const std::string* s_;
};

static_assert(sizeof(Name) == sizeof(void*), "a Name is one pointer");

// The texts of a list of names, for what takes texts (expectations, sets).
inline std::vector<std::string> texts_of(const std::vector<Name>& v) { return std::vector<std::string>(v.begin(), v.end()); }
// The same names in the same order.
inline bool same_texts(const std::vector<Name>& a, const std::vector<std::string>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}
inline bool operator==(const std::vector<Name>& a, const std::vector<std::string>& b) { return same_texts(a, b); }
inline bool operator==(const std::vector<std::string>& a, const std::vector<Name>& b) { return same_texts(b, a); }
inline bool operator!=(const std::vector<Name>& a, const std::vector<std::string>& b) { return !same_texts(a, b); }
inline bool operator!=(const std::vector<std::string>& a, const std::vector<Name>& b) { return !same_texts(b, a); }

}  // namespace fsdpsim

template <>
struct std::hash<fsdpsim::Name> {
  size_t operator()(fsdpsim::Name n) const noexcept { return std::hash<const void*>{}(n.id()); }
};
