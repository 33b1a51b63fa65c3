"""The API's top: tune(), the Module wrapper, and AITune's names with no counterpart here."""
