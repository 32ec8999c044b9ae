// Links Debian's libpmem when the `pmdk` feature is on; nothing else needs a C library.
fn main() {
    if std::env::var_os("CARGO_FEATURE_PMDK").is_some() {
        println!("cargo:rustc-link-lib=pmem");
    }
}
