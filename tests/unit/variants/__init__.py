"""proctor.variants: template and llm prompt variants."""
