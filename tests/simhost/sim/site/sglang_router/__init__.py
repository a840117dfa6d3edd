"""Stand-in for SGLang's router (TEST EQUIPMENT, not sglang-router): see launch_router.py for why it exists."""
