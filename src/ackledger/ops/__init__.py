"""Operating it: trace and looks at running services."""
