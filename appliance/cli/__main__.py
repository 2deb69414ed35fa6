"""`python -m appliance.cli`: the same as the `appliance` command."""

from appliance.cli import main

main()
