//! The one integration-test binary (design.md §2): a module per area.

mod pyenv;
mod pytest;
mod python;
