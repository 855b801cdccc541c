//! Locks every diagnostic of `job!`, `#[operator]` and `#[derive(Outputs)]`.

#[test]
fn diagnostics() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
    cases.pass("tests/ui-pass/*.rs");
}
