pub mod research;
pub mod scripted_model;
