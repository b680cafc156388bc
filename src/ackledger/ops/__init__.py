"""Operating it: status, trace, listings, the schema, and looks at running services."""
