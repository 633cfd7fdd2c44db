#include "model/vocab/name.hpp"

#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace fsdpsim {

const std::string& Name::empty_text() noexcept {
  static const std::string empty;
  return empty;
}

const std::string* Name::intern(std::string_view s) {
  if (s.empty()) return &empty_text();
  // Most lookups hit this thread's cache and take no lock. Its keys view the interned texts.
  thread_local std::unordered_map<std::string_view, const std::string*> cache;
  if (auto it = cache.find(s); it != cache.end()) return it->second;
  // The process table: node-based, so a text's address never moves. Never destroyed, so a
  // Name held by a static or a thread_local outlives nothing it points to.
  static std::mutex mutex;
  static auto* table = new std::unordered_set<std::string>();
  const std::string* text;
  {
    std::lock_guard<std::mutex> lock(mutex);
    text = &*table->emplace(s).first;
  }
  cache.emplace(std::string_view(*text), text);
  return text;
}

}  // namespace fsdpsim
