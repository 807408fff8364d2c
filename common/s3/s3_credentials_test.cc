// Placeholder: tests land in issue 49.
