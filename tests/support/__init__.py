"""Equipment the tests share (waiting for conditions, ...): imported by tests, never by the tool."""
