"""Tests of cloud/privacy: mechanisms against their exact laws, the accountant, the curator CLI."""
