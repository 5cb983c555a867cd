"""What both connectors share and nothing else: option grammars and the shape of their errors.

``postgres_cdc_source`` and ``iggy_spark`` each install and import without the other; this
package is the small common ground they both stand on (it imports neither).
"""
