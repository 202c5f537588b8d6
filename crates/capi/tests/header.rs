//! The checked-in header `include/nvme_userspace.h` matches what cbindgen generates from the
//! sources. Regenerate it with `NVME_CAPI_BLESS=1 cargo test -p nvme-capi --test header`.

use std::path::Path;

#[test]
fn header_is_up_to_date() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("read cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("header is UTF-8");
    let path = crate_dir.join("include/nvme_userspace.h");
    if std::env::var_os("NVME_CAPI_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write the header");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is stale: regenerate it with `NVME_CAPI_BLESS=1 cargo test -p nvme-capi --test \
         header` and commit the result",
        path.display()
    );
}
