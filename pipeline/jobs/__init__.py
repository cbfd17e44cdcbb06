"""Pipeline jobs: each a pure DataFrame transform plus a small `main`."""
