"""mqlens application: console, REST API and command line."""
