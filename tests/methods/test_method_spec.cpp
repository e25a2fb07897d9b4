// Method specs "name:key=value,..." and the registry's errors.
#include <gtest/gtest.h>
#include <functional>

#include "methods/fraction.hpp"
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

TEST(MethodSpec, FractionsAreCheckedOnTheirRange) {
  const MethodSpec s = parse_method_spec("m:p=1,t=0.25,one=1,zero=0,neg=-0.5,big=1.5,bad=x");
  ParamReader r(s);
  EXPECT_EQ(get_fraction(r, "m", "p", 0.9, Fraction::up_to_one), 1.0);
  EXPECT_EQ(get_fraction(r, "m", "t", 0.5, Fraction::below_one), 0.25);
  EXPECT_EQ(get_fraction(r, "m", "missing", 0.9, Fraction::up_to_one), 0.9);
  EXPECT_EQ(error_of([&] { get_fraction(r, "m", "one", 0.5, Fraction::below_one); }),
            "m: one=1 outside (0, 1)");
  EXPECT_EQ(error_of([&] { get_fraction(r, "m", "zero", 0.5, Fraction::up_to_one); }),
            "m: zero=0 outside (0, 1]");
  EXPECT_EQ(error_of([&] { get_fraction(r, "m", "neg", 0.5, Fraction::below_one); }),
            "m: neg=-0.5 outside (0, 1)");
  EXPECT_EQ(error_of([&] { get_fraction(r, "m", "big", 0.5, Fraction::up_to_one); }),
            "m: big=1.5 outside (0, 1]");
  EXPECT_NE(error_of([&] {
              get_fraction(r, "m", "bad", 0.5, Fraction::up_to_one);
            }).find("not a finite number"),
            std::string::npos);
  EXPECT_EQ(error_of([] { check_fraction("mean_pool", "topp", 0, Fraction::up_to_one); }),
            "mean_pool: topp=0 outside (0, 1]");
  EXPECT_NO_THROW(check_fraction("x", "min_share", 1e-9, Fraction::below_one));
}

// Every method with a mass or threshold budget refuses one outside its range in the same words,
// naming itself and the field.
TEST(MethodSpec, EveryBudgetFractionNamesMethodAndField) {
  for (const std::string m : {"momo", "oracle_topk", "mean_pool", "xattention", "flexprefill"}) {
    EXPECT_EQ(error_of([&] { make_method(m + ":topp=1.5"); }), m + ": topp=1.5 outside (0, 1]");
    EXPECT_EQ(error_of([&] { make_method(m + ":min_share=1"); }),
              m + ": min_share=1 outside (0, 1)");
  }
  EXPECT_EQ(error_of([] { make_method("xattention:tau=0"); }), "xattention: tau=0 outside (0, 1]");
  EXPECT_EQ(error_of([] { make_method("flexprefill:gamma=2"); }),
            "flexprefill: gamma=2 outside (0, 1]");
}

}  // namespace
}  // namespace spattn
