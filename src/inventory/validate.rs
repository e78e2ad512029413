//! Raw → validated inventory.
use std::path::Path;
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem { pub place: String, pub message: String }
#[derive(Debug, thiserror::Error)]
#[error("invalid inventory")]
pub struct InventoryError { pub problems: Vec<Problem> }
pub fn load(_path: &Path) -> Result<super::Inventory, InventoryError> { todo!() }
pub fn load_str(_name: &Path, _text: &str) -> Result<super::Inventory, InventoryError> { todo!() }
