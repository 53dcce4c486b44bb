"""LSP glue for leir-lsp."""
