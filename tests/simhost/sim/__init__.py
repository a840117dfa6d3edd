"""SGLang simulator: TEST EQUIPMENT for specdeploy's simulated GPU hosts (no GPU, no model math)."""
