// Method specs "name:key=value,..." and the registry's errors.
#include <gtest/gtest.h>
#include <functional>

#include "spattn/error.hpp"
#include "spattn/method.hpp"

namespace spattn {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MethodSpec, ParsesNameAndParameters) {
  const MethodSpec s = parse_method_spec("vertical_slash: vertical=1000 , slash=2048");
  EXPECT_EQ(s.name, "vertical_slash");
  ASSERT_EQ(s.params.size(), 2u);
  EXPECT_EQ(s.params.at("vertical"), "1000");
  EXPECT_EQ(s.params.at("slash"), "2048");
  EXPECT_TRUE(parse_method_spec("dense").params.empty());
}

TEST(MethodSpec, MalformedSpecsRaiseError) {
  EXPECT_NE(error_of([] { parse_method_spec(""); }).find("empty method name"), std::string::npos);
  EXPECT_NE(error_of([] { parse_method_spec(":a=1"); }).find("empty method name"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_method_spec("x:a"); }).find("not key=value"), std::string::npos);
  EXPECT_NE(error_of([] { parse_method_spec("x:=1"); }).find("empty parameter"), std::string::npos);
  EXPECT_NE(error_of([] { parse_method_spec("x:a=1,a=2"); }).find("given twice"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_method_spec("x:a=1,"); }).find("trailing"), std::string::npos);
}

TEST(MethodSpec, UnknownMethodsAndParametersRaiseError) {
  const std::string unknown = error_of([] { make_method("no_such_method"); });
  EXPECT_NE(unknown.find("unknown method 'no_such_method'"), std::string::npos);
  EXPECT_NE(unknown.find("dense"), std::string::npos);  // lists the known ones
  const std::string param = error_of([] { make_method("dense:foo=1"); });
  EXPECT_NE(param.find("unknown parameter 'foo'"), std::string::npos);
  EXPECT_NO_THROW(make_method("dense"));
}

TEST(MethodSpec, ParamReaderChecksTypesAndRanges) {
  const MethodSpec s = parse_method_spec("m:i=12,d=0.5,bad=x,big=99");
  ParamReader r(s);
  EXPECT_EQ(r.get_int("i", 0, 0, 100), 12);
  EXPECT_EQ(r.get_double("d", 0, 0, 1), 0.5);
  EXPECT_EQ(r.get_int("missing", 7, 0, 10), 7);
  EXPECT_NE(error_of([&] { r.get_int("bad", 0, 0, 10); }).find("not an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { r.get_double("bad", 0, 0, 10); }).find("not a finite number"),
            std::string::npos);
  EXPECT_NE(error_of([&] { r.get_int("big", 0, 0, 10); }).find("out of range"), std::string::npos);
  EXPECT_NO_THROW(r.finish());
  ParamReader unread(s);
  EXPECT_NE(error_of([&] { unread.finish(); }).find("unknown parameter"), std::string::npos);
}

}  // namespace
}  // namespace spattn
