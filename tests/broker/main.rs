//! The one integration-test binary: a real broker, real clients. A module per area.

mod azservicebus;
mod child;
mod containers;
mod daemon;
mod durability;
mod emulator_config;
mod fe2o3_client;
mod go;
mod go_recipe;
mod java;
mod jms;
mod js;
mod lifetime;
mod observe;
mod powercut;
mod powercut_fs;
mod prepared;
mod pyenv;
mod pytest;
mod python;
mod raw;
mod runner;
mod settlement;
mod spring;
mod support;
mod transactions;
