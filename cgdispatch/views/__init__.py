"""Show: tables, figures, widgets, dashboards and sweep reports."""
