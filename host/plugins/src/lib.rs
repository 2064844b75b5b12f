//! The wasm plugin runtime (placeholder until the admission issue lands).
