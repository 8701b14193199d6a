#include "base/io/settings.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "base/check.h"

namespace relpos::io {
namespace {

// 1048576 -> "2^20" (powers of two above 65536); other integers as digits;
// the rest as %g.
std::string FormatLimit(double x) {
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == std::floor(x) && std::fabs(x) < 9.2e18) {
    const int64_t i = static_cast<int64_t>(x);
    if (i > 65536 && (i & (i - 1)) == 0) {
      int e = 0;
      while ((int64_t{1} << e) != i) ++e;
      return "2^" + std::to_string(e);
    }
    if (i == 1'000'000'000) return "1e9";
    return std::to_string(i);
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

double AsDouble(const SettingValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  return 0;
}

const char* TypeWord(SettingType type) {
  switch (type) {
    case SettingType::kInt:
      return "an integer";
    case SettingType::kUnsigned:
      return "a non-negative integer";
    case SettingType::kDouble:
      return "a number";
    case SettingType::kBool:
      return "true or false";
    case SettingType::kString:
      return "a string";
  }
  return "?";
}

}  // namespace

std::string DescribeValid(SettingType type, const Range& r,
                          const std::vector<std::string>& choices) {
  if (type == SettingType::kBool) return "true, false";
  if (type == SettingType::kString) {
    if (choices.empty()) return "";
    std::string s;
    for (const std::string& c : choices) s += (s.empty() ? "" : ", ") + c;
    return s;
  }
  const bool has_lo = !std::isinf(r.lo) &&
                      !(type == SettingType::kUnsigned && r.lo == 0 &&
                        !r.lo_open);
  const bool has_hi = !std::isinf(r.hi) && r.hi < 1.8e19;
  if (has_lo && has_hi) {
    return std::string(r.lo_open ? "(" : "[") + FormatLimit(r.lo) + ", " +
           FormatLimit(r.hi) + (r.hi_open ? ")" : "]");
  }
  if (has_lo) return (r.lo_open ? "> " : ">= ") + FormatLimit(r.lo);
  if (has_hi) return (r.hi_open ? "< " : "<= ") + FormatLimit(r.hi);
  return "any";
}

std::string CheckValue(SettingType type, const Range& r,
                       const std::vector<std::string>& choices,
                       const SettingValue& value) {
  const std::string got = " (got " + FormatSettingValue(value) + ")";
  if (type == SettingType::kString) {
    if (choices.empty()) return "";
    for (const std::string& c : choices) {
      if (c == std::get<std::string>(value)) return "";
    }
    return "must be one of " + DescribeValid(type, r, choices) + " (got " +
           QuotedPath(std::get<std::string>(value)) + ")";
  }
  if (type == SettingType::kBool) return "";
  const double x = AsDouble(value);
  // An unsigned value above 2^63 compares correctly in double too.
  const bool ok = std::isfinite(x) && (r.lo_open ? x > r.lo : x >= r.lo) &&
                  (r.hi_open ? x < r.hi : x <= r.hi);
  if (ok) return "";
  const std::string valid = DescribeValid(type, r, choices);
  if (valid == "any") return "must be finite" + got;
  if (valid[0] == '[' || valid[0] == '(') return "must be in " + valid + got;
  return "must be " + valid + got;
}

void CheckOrThrow(SettingType type, const Range& range,
                  const std::vector<std::string>& choices,
                  const SettingValue& value, const std::string& what) {
  const std::string problem = CheckValue(type, range, choices, value);
  RELPOS_CHECK_ARG(problem.empty(), what << " " << problem);
}

std::string FormatSettingValue(const SettingValue& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  if (const auto* u = std::get_if<uint64_t>(&value)) return std::to_string(*u);
  if (const auto* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  std::ostringstream os;
  os << std::get<double>(value);
  return os.str();
}

SettingValue ReadJsonSetting(SettingType type, const nlohmann::json& v,
                             const std::string& what, const std::string& key) {
  auto fail = [&](const char* want) {
    RELPOS_THROW(FormatError, what << " field '" << key << "' must be " << want
                                   << " (got " << v.dump() << ")");
  };
  switch (type) {
    case SettingType::kInt:
      if (v.is_number_unsigned()) {
        const uint64_t u = v.get<uint64_t>();
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          fail("an integer below 2^63");
        }
        return static_cast<int64_t>(u);
      }
      if (!v.is_number_integer()) fail("an integer");
      return v.get<int64_t>();
    case SettingType::kUnsigned:
      if (!v.is_number_unsigned() &&
          !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
        fail("a non-negative integer");
      }
      return v.get<uint64_t>();
    case SettingType::kDouble:
      if (!v.is_number()) fail("a number");
      return v.get<double>();
    case SettingType::kBool:
      if (!v.is_boolean()) fail("true or false");
      return v.get<bool>();
    case SettingType::kString:
      if (!v.is_string()) fail("a string");
      return PathFromText(v.get<std::string>(), what + " field '" + key + "'");
  }
  fail("valid");
  return {};
}

SettingValue ParseSettingText(SettingType type, const std::string& text,
                              const std::string& name) {
  auto fail = [&]() {
    RELPOS_THROW(InvalidArgument, name << " must be " << TypeWord(type)
                                       << " (got " << QuotedPath(text)
                                       << ")");
  };
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  // Integers are decimal digits (a '-' first for kInt) and nothing else:
  // strtoll and strtoull would skip spaces, take a '+', and turn " -1" into
  // 2^64 - 1; every such text is refused, never clamped.
  const auto digits_from = [&](size_t i) {
    return text.size() > i &&
           text.find_first_not_of("0123456789", i) == std::string::npos;
  };
  switch (type) {
    case SettingType::kInt: {
      if (!digits_from(!text.empty() && text[0] == '-' ? 1 : 0)) fail();
      const long long x = std::strtoll(begin, &end, 10);
      if (*end != '\0' || errno == ERANGE) fail();
      return static_cast<int64_t>(x);
    }
    case SettingType::kUnsigned: {
      if (!digits_from(0)) fail();
      const unsigned long long x = std::strtoull(begin, &end, 10);
      if (*end != '\0' || errno == ERANGE) fail();
      return static_cast<uint64_t>(x);
    }
    case SettingType::kDouble: {
      const double x = std::strtod(begin, &end);
      if (text.empty() || *end != '\0') fail();
      return x;
    }
    case SettingType::kBool:
      if (text == "true" || text == "1") return true;
      if (text == "false" || text == "0") return false;
      fail();
      return false;
    case SettingType::kString:
      return text;
  }
  fail();
  return {};
}

void ThrowNotObject(const std::string& what, const nlohmann::json& j) {
  RELPOS_THROW(FormatError, what << " must be a JSON object (got "
                                 << j.type_name() << ")");
}

void ThrowUnknownKey(const std::string& what, const std::string& key) {
  RELPOS_THROW(FormatError, what << " has unknown field '" << key << "'");
}

std::string MarkdownTable(const std::vector<SettingRow>& rows) {
  auto code = [](const std::string& s) {
    return s.empty() ? std::string("") : "`" + s + "`";
  };
  std::string out =
      "| JSON key | flag | type | default | valid | meaning |\n"
      "| --- | --- | --- | --- | --- | --- |\n";
  for (const SettingRow& r : rows) {
    std::string flag = r.flag;
    const size_t comma = flag.find(',');
    if (comma != std::string::npos) {
      flag = flag.substr(0, comma) + "`, `" + flag.substr(comma + 1);
    }
    std::string help = r.help;
    for (size_t p = 0; (p = help.find('|', p)) != std::string::npos; p += 2) {
      help.replace(p, 1, "\\|");
    }
    out += "| " + code(r.key) + " | " + code(flag) + " | " + r.type + " | " +
           r.default_value + " | " + r.valid + " | " + help + " |\n";
  }
  return out;
}

}  // namespace relpos::io
