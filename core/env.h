// Every environment variable the library and its programs read, declared once in one table
// (NCCL's NCCL_PARAM) with its default, the values it accepts and what it means; read only
// through the functions below, which refuse a value of the wrong form or out of range with an
// EnvError naming the variable, the value and what is accepted: never truncated, clamped or
// ignored. An unset or empty variable means "not given" (the default applies).
//
// core/ holds the table for every layer (core never includes comm/ or fsdp/, so the one list
// must live here); comm/env.h builds the launcher's and the backends' typed accessors on it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace fsdp {

// A bad environment value: a ValueError, so one catch of fsdp::Error handles it too.
class EnvError : public ValueError {
 public:
  using ValueError::ValueError;
};

namespace env {

enum class KnobKind {
  Integer,  // a decimal integer within [lo, hi]
  Switch,   // 0 or 1
  Choice,   // one of the words in `accepted` (separated by '|')
  Text,     // a string; `accepted` says which (its reader checks the form)
};

// One knob: everything a reader and the documentation need to know about it.
struct Knob {
  const char* name;
  KnobKind kind;
  const char* fallback;  // the default, as the user would write it; "-" when there is none
  const char* accepted;  // Choice: "caching|malloc"; Text: the form in words; else ""
  std::int64_t lo = 0;   // Integer only
  std::int64_t hi = 0;
  const char* meaning = "";
};

// The table: every variable, in documentation order.
const std::vector<Knob>& knobs();
// The declared knob of this name; an AssertionError for a name not in the table (a reader of an
// undeclared variable is a bug).
const Knob& knob(const char* name);
// What a knob accepts, in words: "1 to 65535", "0 or 1", "caching or malloc".
std::string accepted(const Knob& k);

// The variable's value; nullopt when unset or empty.
std::optional<std::string> raw(const char* name);
// An Integer knob, checked against its declared range.
std::optional<std::int64_t> integer(const char* name);
// A Switch knob: its value, or its default when unset.
bool enabled(const char* name);
// A Choice knob: one of its words, or nullopt when unset.
std::optional<std::string> choice(const char* name);

// Reads every Integer, Switch and Choice knob: the first bad value is an EnvError. A program
// calls it first, to refuse a bad environment before any work (the readers check Text knobs).
void check_all();

// Throws the EnvError for `name`='`value`' that is not `expected` ("not an integer").
[[noreturn]] void refuse(const char* name, const std::string& value, const std::string& expected);

}  // namespace env
}  // namespace fsdp
