"""The operator's optional features, one module or package each, none importing another."""
