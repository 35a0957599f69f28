"""The bundled YAML conformance scenarios (data only; shipped inside the wheel)."""
