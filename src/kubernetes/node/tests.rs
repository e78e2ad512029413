//! Tests of the node files, routes and images (pure).

#[allow(unused_imports)]
use super::*;
